//! A real browser for the console's tests: Debian's headless Chromium,
//! driven through chromedriver's W3C WebDriver protocol (plain HTTP JSON,
//! spoken here with reqwest; `ops/test.sh` installs both programs).

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use base64::Engine as _;
use serde_json::{Value, json};

/// The W3C key under which an element reference comes back.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long a page gets to show what a step waits for.
const PATIENCE: Duration = Duration::from_secs(15);

pub struct Browser {
    /// Kept for its `kill_on_drop`.
    _driver: tokio::process::Child,
    http: reqwest::Client,
    session: String,
    profile: PathBuf,
}

impl Browser {
    pub async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; ops/test.sh installs it)");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
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
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {created}"))
            .to_owned();
        Self {
            _driver: driver,
            http,
            session: format!("{base}/session/{session}"),
            profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        assert!(
            answer["value"]["error"].is_null(),
            "WebDriver {path}: {answer}"
        );
        answer["value"].clone()
    }

    pub async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// Runs `script` (a function body; `arguments` as in WebDriver) in the page.
    pub async fn run(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits until `condition` (a JavaScript expression) holds in the page.
    pub async fn wait_for(&self, condition: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if self.run(&format!("return !!({condition});")).await == json!(true) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed: {condition}\nit shows: {}",
                self.run("return document.body.innerText;").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT].as_str().unwrap().to_owned()
    }

    /// Types into the field `css` (after clearing it), as a person would.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/clear"),
            Some(json!({})),
        )
        .await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub async fn click(&self, css: &str) {
        let element = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    pub async fn text(&self, css: &str) -> String {
        let element = self.element(css).await;
        self.call(
            reqwest::Method::GET,
            &format!("/element/{element}/text"),
            None,
        )
        .await
        .as_str()
        .unwrap()
        .to_owned()
    }

    /// Signs in to the console page that is open, as a person would: waits
    /// for the sign-in form, types the token, submits.
    pub async fn sign_in(&self, token: &str) {
        self.wait_for("!document.getElementById('sign-in').hidden")
            .await;
        self.type_into("#token", token).await;
        self.click("#sign-in-form button").await;
    }

    /// Saves what the window shows as a PNG.
    pub async fn screenshot(&self, path: &Path) {
        let encoded = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap())
            .unwrap();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    pub async fn close(self) {
        let _ = self.http.delete(&self.session).send().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
