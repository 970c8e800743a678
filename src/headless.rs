//! `tricklab run MATRIX... --headless`: the progress-bar consumer of the
//! event stream. First Ctrl-C (or SIGTERM) finishes the current run and
//! stops; the second cancels it. Nothing finished is lost: the store records
//! each run as it ends.

use crate::events::{Command, Event, LogLevel, RunStatus};
use crate::session::Session;
use anyhow::Result;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::io::IsTerminal;

struct Bars {
    multi: Option<MultiProgress>,
    overall: ProgressBar,
    current: ProgressBar,
}

impl Bars {
    fn new() -> Bars {
        if std::io::stderr().is_terminal() {
            let multi = MultiProgress::new();
            let overall = multi.add(ProgressBar::new(0));
            overall.set_style(
                ProgressStyle::with_template(
                    "runs {bar:30} {pos}/{len} elapsed {elapsed} eta {eta} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let current = multi.add(ProgressBar::new(0));
            current.set_style(
                ProgressStyle::with_template(
                    "{prefix:.bold} {bar:30} step {pos}/{len} eta {eta} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Bars {
                multi: Some(multi),
                overall,
                current,
            }
        } else {
            Bars {
                multi: None,
                overall: ProgressBar::hidden(),
                current: ProgressBar::hidden(),
            }
        }
    }

    /// A line that survives the bars (or plain output without a terminal).
    fn line(&self, s: String) {
        match &self.multi {
            Some(m) => {
                let _ = m.println(s);
            }
            None => eprintln!("{s}"),
        }
    }
}

pub fn run_headless(mut session: Session) -> Result<i32> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let bars = Bars::new();
    let mut interrupts = 0;
    let mut failed = 0;
    let mut done_runs = 0;
    rt.block_on(async {
        // A service manager stops with SIGTERM: treat it as the first Ctrl-C.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => t.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(terminated);
        loop {
            tokio::select! {
                ev = session.recv() => {
                    let Some(ev) = ev else { break };
                    match ev {
                        Event::Queue(items) => {
                            let todo = items.iter().filter(|i| i.status != RunStatus::Skipped).count();
                            bars.overall.set_length(todo as u64);
                        }
                        Event::RunStarted { run, total_steps, device, .. } => {
                            bars.current.reset();
                            bars.current.set_length(total_steps);
                            bars.current.set_prefix(run.to_string());
                            bars.line(format!("start {run} on {device}"));
                        }
                        Event::Steps { rows, .. } => {
                            if let Some(r) = rows.last() {
                                bars.current.set_position(r.step);
                                bars.current.set_message(format!("loss {:.3} lr {:.4}", r.loss, r.lr));
                            }
                        }
                        Event::Epoch { run, row } => {
                            let acc = row.test_acc_tta.unwrap_or(row.test_acc);
                            bars.current.set_message(format!("epoch {} acc {:.2}%", row.epoch, 100.0 * acc));
                            if bars.multi.is_none() {
                                eprintln!("{run} epoch {} loss {:.4} acc {:.2}% {:.0} img/s", row.epoch, row.train_loss, 100.0 * acc, row.images_per_s);
                            }
                        }
                        Event::RunFinished { run, summary } => {
                            done_runs += 1;
                            bars.overall.inc(1);
                            bars.line(format!(
                                "done  {run}: acc {:.2}% (TTA) in {:.2} s DAWNBench-style{}",
                                100.0 * summary.acc_tta,
                                summary.clocks.dawn_s,
                                summary.time_to_target_s.map(|t| format!(", target at {t:.2} s")).unwrap_or_default()
                            ));
                        }
                        Event::RunFailed { run, reason } => {
                            failed += 1;
                            bars.overall.inc(1);
                            bars.line(format!("FAILED {run}: {reason}"));
                        }
                        Event::RunCancelled { run } => bars.line(format!("cancelled {run}")),
                        Event::Log { level, message } if level != LogLevel::Info => bars.line(format!("{}: {message}", level.as_str())),
                        _ => {}
                    }
                }
                _ = &mut terminated, if interrupts == 0 => {
                    interrupts += 1;
                    bars.line("terminated: finishing the current run, then stopping".into());
                    session.send(Command::StopAfterCurrent);
                }
                _ = tokio::signal::ctrl_c() => {
                    interrupts += 1;
                    if interrupts == 1 {
                        bars.line("interrupt: finishing the current run, then stopping (Ctrl-C again cancels it)".into());
                        session.send(Command::StopAfterCurrent);
                    } else {
                        bars.line("interrupt: cancelling the current run".into());
                        session.send(Command::CancelCurrent);
                        session.send(Command::Shutdown);
                    }
                }
            }
        }
    });
    bars.current.finish_and_clear();
    bars.overall.finish_and_clear();
    let dirs = session.results_dirs();
    let halted = session.halted();
    session.join();
    // The handler above replaced Ctrl-C's default: keep honouring it while the
    // reports are written (every file is written atomically, so stopping is safe).
    let written = rt.block_on(async {
        let reports = tokio::task::spawn_blocking(move || write_reports(&dirs, done_runs, failed));
        tokio::select! {
            r = reports => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    match written {
        None => {
            eprintln!(
                "interrupted while writing the reports: every finished run is stored; `tricklab report DIR --plots DIR` writes them"
            );
            return Ok(130);
        }
        Some(r) => r??,
    }
    if let Some(reason) = &halted {
        eprintln!("error: {reason}");
    }
    Ok(if interrupts > 0 {
        130
    } else if halted.is_some() || failed > 0 {
        1
    } else {
        0
    })
}

fn write_reports(dirs: &[std::path::PathBuf], done_runs: usize, failed: usize) -> Result<()> {
    for d in dirs {
        if !d.join("runs.parquet").exists() {
            eprintln!("{}: no run finished, no report", d.display());
            continue;
        }
        let report = crate::report::aggregate(std::slice::from_ref(d), &Default::default())?;
        println!("{}", report.to_markdown());
        let files = crate::charts::export(d)?;
        println!(
            "results: {} ({} runs finished, {failed} failed); report and charts: {}",
            d.display(),
            done_runs,
            files
                .iter()
                .map(|f| f.file_name().unwrap_or_default().to_string_lossy())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
