//! `tricklab run MATRIX... --headless`: the progress-bar consumer of the
//! event stream. The first Ctrl-C or SIGTERM finishes the current run and
//! stops; a second, or the grace period after the first running out, cancels
//! it; a third stops at once. The reports and charts written after the runs
//! stop at the next file on a signal, and say which were written. Nothing
//! finished is lost: the store records each run as it ends.

use crate::config::Clock;
use crate::events::{Command, Event, LogLevel, RunStatus};
use crate::session::Session;
use crate::util::signals;
use anyhow::Result;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How long the run in progress may take to finish after the first stop
/// signal before it is cancelled (`TRICKLAB_STOP_GRACE_S`, default 120 s).
fn grace() -> Duration {
    let s = std::env::var("TRICKLAB_STOP_GRACE_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .unwrap_or(120.0);
    Duration::from_secs_f64(s)
}

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

#[allow(
    clippy::too_many_lines,
    reason = "the event loop and its end of session report, in order"
)]
pub fn run_headless(mut session: Session) -> Result<i32> {
    signals::install();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let bars = Bars::new();
    let (mut failed, mut done_runs) = (0, 0);
    // Each run's own clock (its recipe's convention), from its start event.
    // A streamed run's decode location (`cpu decode`), for its epoch lines.
    let mut decodes: std::collections::HashMap<crate::events::RunId, String> = Default::default();
    let mut clocks: std::collections::HashMap<crate::events::RunId, (Clock, bool)> =
        Default::default();
    let grace = grace();
    rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        // Signals acted on so far, and when the first arrived.
        let (mut handled, mut first_at, mut cancelled) = (0usize, None::<Instant>, false);
        loop {
            tokio::select! {
                ev = session.recv() => {
                    let Some(ev) = ev else { break };
                    match ev {
                        Event::Queue(items) => {
                            let todo = items.iter().filter(|i| i.status != RunStatus::Skipped).count();
                            bars.overall.set_length(todo as u64);
                        }
                        Event::RunStarted { run, total_steps, device, record, .. } => {
                            clocks.insert(run.clone(), (record.clock(), record.uses_tta()));
                            bars.current.reset();
                            bars.current.set_length(total_steps);
                            bars.current.set_prefix(run.to_string());
                            // A streamed run: where its loader decodes, from what.
                            let loader = record.loader.as_ref().map(|l| format!(" ({l})")).unwrap_or_default();
                            if let Some(l) = &record.loader {
                                decodes.insert(run.clone(), l.split(" from ").next().unwrap_or(l).to_string());
                            }
                            bars.line(format!("start {run} on {device}{loader}"));
                        }
                        Event::Steps { rows, loader_share, .. } => {
                            if let Some(r) = rows.last() {
                                bars.current.set_position(r.step);
                                let loader = if loader_share > 0.0 { format!(" loader {:.0}%", 100.0 * loader_share) } else { String::new() };
                                bars.current.set_message(format!("loss {:.3} lr {:.4}{loader}", r.loss, r.lr));
                            }
                        }
                        Event::Epoch { run, row } => {
                            let acc = row.test_acc_tta.unwrap_or(row.test_acc);
                            // An epoch without an evaluation (eval_every) has no accuracy.
                            let acc = if acc.is_finite() { format!("{:.2}%", 100.0 * acc) } else { "-".into() };
                            bars.current.set_message(format!("epoch {} acc {acc}", row.epoch));
                            if bars.multi.is_none() {
                                let share = row.loader_s / row.train_s.max(1e-9);
                                let loader = match row.loader_images_per_s {
                                    Some(r) => format!(
                                        " (loader, {}: {:.0}% wait, {r:.0} img/s)",
                                        decodes.get(&run).map_or("decode", String::as_str),
                                        100.0 * share
                                    ),
                                    None if share > 0.0 => format!(" (loader {:.0}%)", 100.0 * share),
                                    None => String::new(),
                                };
                                // A script that reports no images has no throughput to print.
                                let rate = if row.images_per_s > 0.0 { format!(" {:.0} img/s", row.images_per_s) } else { String::new() };
                                eprintln!("{run} epoch {} loss {:.4} acc {acc}{rate}{loader}", row.epoch, row.train_loss);
                            }
                        }
                        Event::RunFinished { run, summary } => {
                            done_runs += 1;
                            bars.overall.inc(1);
                            let (clock, tta) = clocks.remove(&run).unwrap_or((Clock::Dawn, false));
                            let c = &summary.clocks;
                            let share = c.loader_s / c.hlb_s.max(1e-9);
                            // A data-parallel run: its gradient all-reduce a step by DDP's clock.
                            let ddp = summary.ranks.first().and_then(|r| r.ddp).map(|t| {
                                format!(
                                    "; {} ranks, all-reduce {:.1} ms a step ({:.1} exposed)",
                                    summary.world_size(),
                                    1e3 * t.allreduce_s,
                                    1e3 * t.exposed_s()
                                )
                            });
                            bars.line(format!(
                                "done  {run}: {} in {:.2} s on the {} clock{}{}{}",
                                summary.acc_words(tta),
                                c.on(clock),
                                clock.name(),
                                summary.time_to_target_s.map(|t| format!(", target at {t:.2} s")).unwrap_or_default(),
                                ddp.unwrap_or_default(),
                                if share > crate::report::DATA_BOUND_SHARE {
                                    format!("; data-bound: {:.1}% of the training loop went to the loader", 100.0 * share)
                                } else {
                                    String::new()
                                }
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
                _ = tick.tick() => {
                    let now = signals::received();
                    if now > handled && handled == 0 {
                        first_at = Some(Instant::now());
                        bars.line(format!(
                            "{}: finishing the current run, then stopping (a second Ctrl-C or SIGTERM, or {} s, cancels it)",
                            signals::name(),
                            grace.as_secs()
                        ));
                        session.send(Command::StopAfterCurrent);
                    }
                    let overdue = first_at.is_some_and(|t| t.elapsed() >= grace);
                    if (now >= 2 || overdue) && !cancelled {
                        cancelled = true;
                        bars.line(if now >= 2 {
                            "stop signal again: cancelling the current run (a third stops at once)".into()
                        } else {
                            format!("the current run did not end within {} s of the stop: cancelling it", grace.as_secs())
                        });
                        session.send(Command::CancelCurrent);
                        session.send(Command::Shutdown);
                    }
                    if now >= 3 {
                        eprintln!("stopping now: the run in progress is lost; every finished run is stored (`tricklab run --headless --resume DIR` continues)");
                        std::process::exit(signals::exit_code());
                    }
                    handled = now;
                }
            }
        }
    });
    bars.current.finish_and_clear();
    bars.overall.finish_and_clear();
    let dirs = session.results_dirs();
    let halted = session.halted();
    session.join();
    if signals::stopping() {
        for d in &dirs {
            eprintln!(
                // Headless again: without --headless, `run --resume` opens the TUI.
                "{}: every finished run is stored in {}; `tricklab run --headless --resume {}` continues, `tricklab report {} --plots {}` writes its report",
                signals::name(),
                d.display(),
                d.display(),
                d.display(),
                d.display()
            );
        }
        return Ok(signals::exit_code());
    }
    crate::export::writeup::end_of_session(&dirs, &mut Log { done_runs, failed })?;
    if signals::stopping() {
        return Ok(signals::exit_code());
    }
    if let Some(reason) = &halted {
        eprintln!("error: {reason}");
    }
    use crate::util::exit;
    Ok(match (&halted, failed) {
        (Some(_), _) => exit::FAILURE,
        (None, 0) => exit::OK,
        (None, _) => exit::REGRESSION,
    })
}

/// The session's end in the log (`export::writeup::end_of_session`): a
/// short table a folder, as hyperfine ends, the whole write-up being in the
/// files; a stop signal's end says what was written and what was not.
struct Log {
    done_runs: usize,
    failed: usize,
}

impl crate::export::writeup::SessionEnd for Log {
    fn ended(&mut self, d: &std::path::Path, ending: crate::export::writeup::Ending) -> Result<()> {
        use crate::export::writeup::Ending;
        let (d, done_runs, failed) = (d.display(), self.done_runs, self.failed);
        match ending {
            Ending::NothingFinished => eprintln!("{d}: no run finished, no report"),
            Ending::NotWritten => eprintln!(
                "{}: no report written for {d}; `tricklab report {d} --plots {d}` writes it",
                signals::name()
            ),
            Ending::Partly(files) => eprintln!(
                "{}: of {d}'s report and charts only {} were written; `tricklab report {d} --plots {d}` writes the rest",
                signals::name(),
                chart_names(&files)
            ),
            Ending::Written(report, files) => {
                print!("{}", report.to_text());
                println!(
                    "results: {d} ({done_runs} runs finished, {failed} failed); report: {d}/report.md, {d}/report.html; charts: {}",
                    chart_names(&files)
                );
            }
            Ending::Failed(why) => anyhow::bail!(why),
        }
        Ok(())
    }
}

/// The charts among the files written, by name.
fn chart_names(files: &[std::path::PathBuf]) -> String {
    files
        .iter()
        .filter(|f| !f.extension().is_some_and(|e| e == "md" || e == "html"))
        .map(|f| f.file_name().unwrap_or_default().to_string_lossy())
        .collect::<Vec<_>>()
        .join(", ")
}
