//! Frame render time of every TUI screen on ratatui's TestBackend, and the
//! idle CPU use of the real TUI (target: under 2% of a core), measured by
//! running it in tmux and reading /proc/<pid>/stat for 10 s.
#![allow(
    clippy::too_many_lines,
    reason = "a benchmark's setup, measurement and record read top to bottom"
)]

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::process::Command;
use std::time::{Duration, Instant};
use tricklab::tui::sample::sample_state;
use tricklab::tui::state::Tab;
use tricklab::tui::view::render;

fn cpu_ticks(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn main() {
    println!("## tui_render\n");
    println!("| screen | 80×24 µs/frame | 200×60 µs/frame |");
    println!("|---|---|---|");
    let mut s = sample_state(false);
    for tab in Tab::ALL {
        s.tab = tab;
        let mut cols = Vec::new();
        for (w, h) in [(80u16, 24u16), (200, 60)] {
            let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
            let n = 300;
            let start = Instant::now();
            for _ in 0..n {
                t.draw(|f| render(f, &s)).unwrap();
            }
            cols.push(start.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
        println!("| {} | {:.0} | {:.0} |", tab.title(), cols[0], cols[1]);
    }

    // Idle CPU: the real binary browsing a finished folder, in tmux.
    let tmp = tempfile::tempdir().unwrap();
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_tricklab"));
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.toml");
    let ok = Command::new(&bin)
        .args([
            "run",
            fixture.to_str().unwrap(),
            "--headless",
            "--results",
            "res",
            "--repeats",
            "1",
        ])
        .current_dir(tmp.path())
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        println!("\n(idle CPU not measured: build the release binary first, `make build`)");
        return;
    }
    let dir = std::fs::read_dir(tmp.path().join("res/tiny-test"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // A fresh tmux server per measurement: one still shutting down refuses new sessions.
    let tmux = |round: usize, args: &[&str]| {
        Command::new("tmux")
            .arg("-L")
            .arg(format!("tricklab-bench-{}-{round}", std::process::id()))
            .args(args)
            .output()
    };
    let cmds = [
        format!("{} tui --results {}", bin.display(), dir.display()),
        format!(
            "cd {} && {} tui {} --results-root res2",
            tmp.path().display(),
            bin.display(),
            fixture.display()
        ),
    ];
    println!("\n| TUI state | CPU use over 10 s (% of one core) |");
    println!("|---|---|");
    for (round, (label, cmd)) in [
        "browsing a results folder",
        "live session after its queue finished",
    ]
    .iter()
    .zip(cmds)
    .enumerate()
    {
        if tmux(
            round,
            &[
                "new-session",
                "-d",
                "-s",
                "b",
                "-x",
                "120",
                "-y",
                "40",
                &cmd,
            ],
        )
        .is_err()
        {
            println!("| {label} | tmux not available |");
            continue;
        }
        // Let it start, train the tiny queue (live session) and settle.
        std::thread::sleep(Duration::from_secs(25));
        let pid = String::from_utf8_lossy(
            &tmux(round, &["display", "-p", "-t", "b", "#{pane_pid}"])
                .unwrap()
                .stdout,
        )
        .trim()
        .to_string();
        let hz = 100.0;
        let (Some(a), t0) = (cpu_ticks(&pid), Instant::now()) else {
            println!("| {label} | process not found |");
            let _ = tmux(round, &["kill-server"]);
            continue;
        };
        std::thread::sleep(Duration::from_secs(10));
        let b = cpu_ticks(&pid).unwrap_or(a);
        let pct = 100.0 * (b - a) as f64 / hz / t0.elapsed().as_secs_f64();
        println!("| {label} | {pct:.2} |");
        let _ = tmux(round, &["kill-server"]);
    }
}
