//! Schemathesis against `/openapi.json`: generated requests (examples, boundaries, fuzzing,
//! stateful sequences, undeclared methods) find no 5xx and no response that contradicts the
//! document. Needs `schemathesis` on PATH (`.ci/run` installs the pinned version).
//!
//! Excluded: `positive_data_acceptance`, which expects every schema-valid request to be
//! accepted; business rules beyond a JSON schema (an unknown ISO currency, a total that
//! overflows, an id that does not exist, admin-only data) rightly refuse some of them.

use std::process::Command;

use crate::helpers::{Backend, TestApp, service_missing};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_errors_and_no_schema_violations() {
    if Command::new("schemathesis").arg("--version").output().is_err() {
        service_missing("schemathesis", "not on PATH (pip install schemathesis)");
        return;
    }
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else { return };
    let token = app.admin_token("schemathesis");
    let url = format!("{}/openapi.json", app.base);
    let output = tokio::task::spawn_blocking(move || {
        // Its cache goes to a scratch directory, not into the repository.
        Command::new("schemathesis")
            .current_dir(std::env::temp_dir())
            .args(["run", &url, "--checks", "all", "--exclude-checks", "positive_data_acceptance"])
            .args(["--max-examples", "30", "--seed", "20261129", "--no-color"])
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .output()
    })
    .await
    .unwrap()
    .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found problems:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("passed"), "{stdout}");
}
