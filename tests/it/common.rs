//! What every scenario needs to drive the real binary: the command, its
//! output as text, the repository's own files and a free port.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `tricklab`, without colours (its output is read as text).
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tricklab"));
    c.env("NO_COLOR", "1");
    c
}

/// `tricklab ARGS` run to its end in `cwd`.
pub fn run(args: &[&str], cwd: &Path) -> Output {
    bin()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("running tricklab")
}

pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// (stdout, stderr).
pub fn text(o: &Output) -> (String, String) {
    (out(o), err(o))
}

/// The repository: its ablations/, fixtures and README.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A port the kernel says is free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
