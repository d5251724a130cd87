#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Logs written to a file (or any stderr that is not a terminal) are plain text: no ANSI
//! colour codes for a log collector to choke on.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn logs_to_a_file_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("serve.toml");
    // Upstream on a closed port: the request below makes the proxy log a warning.
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\nstate = \"{}\"\n[upstreams]\nanthropic = \"http://127.0.0.1:1\"\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let log_path = dir.path().join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_foldwire"))
        .args(["--log", "debug", "serve", "--config"])
        .arg(&config)
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let answered = loop {
        let sent = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            use std::io::{Read as _, Write as _};
            let body = r#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
            write!(
                s,
                "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        });
        match sent {
            Ok(out) => break out,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("the server never answered: {e}"),
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(answered.starts_with("HTTP/1.1 502"), "{answered}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("WARN") || log.contains("DEBUG"),
        "nothing was logged:\n{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file:\n{log}"
    );
}
