//! `/docs` in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`)
//! driven by `tests/browser/docs_page.py` (selenium). The page must render every operation
//! of `/openapi.json`, customer routes first, and a call made from the page with the
//! "Authorize" dialog's bearer token must succeed. `.ci/run` installs what is missing.

use std::path::Path;
use std::process::Command;

use crate::helpers::{Backend, TestApp, service_missing};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_page_renders_every_operation_and_calls_the_api_from_a_browser() {
    if !Path::new("/usr/bin/chromium").exists() || !Path::new("/usr/bin/chromedriver").exists() {
        service_missing(
            "chromium",
            "/usr/bin/chromium or /usr/bin/chromedriver missing (apt-get install chromium chromium-driver)",
        );
        return;
    }
    let selenium = Command::new("python3").args(["-c", "import selenium"]).output();
    if !selenium.is_ok_and(|o| o.status.success()) {
        service_missing("selenium", "python3 cannot import selenium (pip install selenium)");
        return;
    }
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else { return };
    let spec: serde_json::Value =
        app.client.get(format!("{}/openapi.json", app.base)).send().await.unwrap().json().await.unwrap();
    let operations: usize =
        spec["paths"].as_object().unwrap().values().map(|item| item.as_object().unwrap().len()).sum();
    let token = app.token("docs-reader");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/docs_page.py");
    let base = app.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3").arg(script).args([&base, &token, &operations.to_string()]).output()
    })
    .await
    .unwrap()
    .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the docs page failed in the browser:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("ok:"), "{stdout}");
}
