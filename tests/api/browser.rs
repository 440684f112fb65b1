//! The console's tests drive a real browser (the lab's WebDriver client,
//! `lab/src/browser.rs`, also what `memd-bench console` times pages with);
//! here every step that fails fails the test, with what the page showed.

use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

// The lab's client, whole; these tests use part of it.
#[allow(dead_code)]
#[path = "../../lab/src/browser.rs"]
mod webdriver;

pub struct Browser(webdriver::Browser);

impl Browser {
    pub async fn start() -> Self {
        Self(webdriver::Browser::start().await.unwrap())
    }

    pub async fn open(&self, url: &str) {
        self.0.open(url).await.unwrap();
    }

    /// Runs `script` (a function body; `arguments` as in WebDriver) in the page.
    pub async fn run(&self, script: &str) -> Value {
        self.0.run(script).await.unwrap()
    }

    /// Waits until `condition` (a JavaScript expression) holds in the page.
    pub async fn wait_for(&self, condition: &str) {
        if let Err(err) = self.0.wait_for(condition).await {
            panic!("{err:#}");
        }
    }

    /// Types into the field `css` (after clearing it), as a person would.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.0.type_into(css, text).await.unwrap();
    }

    pub async fn click(&self, css: &str) {
        self.0.click(css).await.unwrap();
    }

    pub async fn text(&self, css: &str) -> String {
        self.0.text(css).await.unwrap()
    }

    /// Signs in to the console page that is open, as a person would.
    pub async fn sign_in(&self, token: &str) {
        self.0.sign_in(token).await.unwrap();
    }

    /// Saves what the window shows as a PNG.
    pub async fn screenshot(&self, path: &Path) {
        let png = base64::engine::general_purpose::STANDARD
            .decode(self.0.screenshot_base64().await.unwrap())
            .unwrap();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    pub async fn close(self) {
        self.0.close().await;
    }
}
