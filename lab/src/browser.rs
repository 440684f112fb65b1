//! A real browser for the console's tests and `memd-bench console`:
//! Debian's headless Chromium, driven through chromedriver's W3C WebDriver
//! protocol (plain HTTP JSON, spoken with reqwest; `ops/ensure-chromium.sh`
//! installs both programs).

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The W3C key under which an element reference comes back.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long a page gets to show what a step waits for.
const PATIENCE: Duration = Duration::from_secs(15);
/// The program that drives Chromium.
pub const CHROMEDRIVER: &str = "chromedriver";

pub struct Browser {
    /// Kept for its `kill_on_drop`.
    _driver: tokio::process::Child,
    http: reqwest::Client,
    session: String,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless window of
    /// 1400×900.
    pub async fn start() -> anyhow::Result<Self> {
        let port = memd::db::private_server::free_port()?;
        let driver = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context(
                "chromedriver (Debian's chromium-driver; ops/ensure-chromium.sh installs it)",
            )?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while http.get(format!("{base}/status")).send().await.is_err() {
            if Instant::now() > deadline {
                bail!("chromedriver did not start within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile =
            std::env::temp_dir().join(format!("memd-chromium-{}", ulid::Ulid::generate()));
        // The flags this machine's closed network needs (no background
        // connections), and root's need for --no-sandbox.
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--no-first-run",
            "--window-size=1400,900",
            &format!("--user-data-dir={}", profile.display()),
        ];
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
            }}}))
            .send()
            .await?
            .json()
            .await?;
        let Some(session) = created["value"]["sessionId"].as_str() else {
            bail!("chromedriver opened no browser session: {created}");
        };
        Ok(Self {
            _driver: driver,
            http,
            session: format!("{base}/session/{session}"),
            profile,
        })
    }

    /// One WebDriver command on this session; its `value`.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await?.json().await?;
        if !answer["value"]["error"].is_null() {
            bail!("WebDriver {path}: {answer}");
        }
        Ok(answer["value"].clone())
    }

    pub async fn open(&self, url: &str) -> anyhow::Result<()> {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await
            .map(drop)
    }

    /// Runs `script` (a function body; `arguments` as in WebDriver) in the page.
    pub async fn run(&self, script: &str) -> anyhow::Result<Value> {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Runs `script` in the page until it calls `done(value)` (its last
    /// argument, as WebDriver passes it); the value.
    pub async fn run_async(&self, script: &str) -> anyhow::Result<Value> {
        self.call(
            reqwest::Method::POST,
            "/execute/async",
            Some(json!({"script": format!("const done = arguments[arguments.length - 1];\n{script}"), "args": []})),
        )
        .await
    }

    /// Waits until `condition` (a JavaScript expression) holds in the page.
    pub async fn wait_for(&self, condition: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if self.run(&format!("return !!({condition});")).await? == json!(true) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the page never showed: {condition}\nit shows: {}",
                    self.run("return document.body.innerText.slice(0, 3000);")
                        .await?
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn element(&self, css: &str) -> anyhow::Result<String> {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        found[ELEMENT]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no element {css}: {found}"))
    }

    /// Types into the field `css` (after clearing it), as a person would.
    pub async fn type_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let element = self.element(css).await?;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/clear"),
            Some(json!({})),
        )
        .await?;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            Some(json!({"text": text})),
        )
        .await
        .map(drop)
    }

    pub async fn click(&self, css: &str) -> anyhow::Result<()> {
        let element = self.element(css).await?;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await
        .map(drop)
    }

    // The console's tests use it: they include this file (tests/api/browser.rs).
    #[allow(dead_code)]
    pub async fn text(&self, css: &str) -> anyhow::Result<String> {
        let element = self.element(css).await?;
        let text = self
            .call(
                reqwest::Method::GET,
                &format!("/element/{element}/text"),
                None,
            )
            .await?;
        text.as_str()
            .map(str::to_owned)
            .with_context(|| format!("{css} has no text: {text}"))
    }

    /// Signs in to the console page that is open, as a person would: waits
    /// for the sign-in form, types the token, submits.
    pub async fn sign_in(&self, token: &str) -> anyhow::Result<()> {
        self.wait_for("!document.getElementById('sign-in').hidden")
            .await?;
        self.type_into("#token", token).await?;
        self.click("#sign-in-form button").await
    }

    /// The window's content as PNG bytes, base64 as WebDriver sends them.
    /// (The console's tests use it: they include this file, tests/api/browser.rs.)
    #[allow(dead_code)]
    pub async fn screenshot_base64(&self) -> anyhow::Result<String> {
        let encoded = self.call(reqwest::Method::GET, "/screenshot", None).await?;
        encoded
            .as_str()
            .map(str::to_owned)
            .context("WebDriver sent no screenshot")
    }

    pub async fn close(self) {
        let _ = self.http.delete(&self.session).send().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
