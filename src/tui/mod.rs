//! The terminal workbench: one tokio loop over terminal keys, worker events
//! and a tick; state, update and view kept apart (events → state → render).
//! It only consumes [`Event`]s and emits [`Command`]s: it does not know how
//! training works.

mod backend;
pub use backend::Rules;
pub mod sample;
pub mod state;
pub mod update;
pub mod view;

use crate::events::{Command, Event, LogLevel};
use anyhow::Result;
use futures_util::StreamExt;
use ratatui::Terminal;
use ratatui::backend::Backend as TermBackend;
use state::{AppState, Overlay, Reported};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use update::Action;

/// The outside world as the TUI sees it.
pub trait Backend {
    fn send(&mut self, cmd: Command);
    /// Queues a matrix file (its `--tiny` form if `tiny`); returns a
    /// message for the footer.
    fn enqueue(&mut self, matrix: &str, tiny: bool) -> Result<String>;
    /// Matrix files the user can pick from, each with what queueing it
    /// would do (in its `--tiny` form if `tiny`).
    fn matrix_files(&self, tiny: bool) -> Vec<state::PickerEntry>;
    /// Prices the picker's selected file by a probe, in the background,
    /// when it has no earlier runs and no run is training.
    fn price(&mut self, _entry: &state::PickerEntry, _tiny: bool) {}
    /// A probe ended since the last call: the picker's lines are old.
    fn picker_stale(&self) -> bool {
        false
    }
    /// The current results table and effects (called after runs finish).
    fn results(&mut self) -> Result<Reported>;
    /// Writes report.md and the charts; returns the written paths.
    fn export(&mut self) -> Result<Vec<PathBuf>>;
}

/// Frames are drawn at most this often, and only when something changed.
const FRAME: Duration = Duration::from_millis(33);
/// Events drained per loop turn before drawing, so a flood never starves keys.
const MAX_EVENTS_PER_TURN: usize = 512;

/// Runs the UI until the user quits or the event source closes and the user quits.
pub async fn run_app<B: TermBackend>(
    terminal: &mut Terminal<B>,
    state: &mut AppState,
    backend: &mut dyn Backend,
    events: &mut tokio::sync::mpsc::Receiver<Event>,
) -> Result<()>
where
    B::Error: Send + Sync + 'static,
{
    let mut keys = crossterm::event::EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut events_open = true;
    let mut last_draw = Instant::now() - FRAME;
    let mut refresh_results = true;
    // Runs ended since the last report written at the queue's end.
    let mut unreported = false;
    loop {
        if refresh_results {
            refresh_results = false;
            unreported = true;
            refresh(state, backend);
        }
        // The queue has ended: the report is written without being asked.
        if unreported && !state.browse_only && state.queue_idle() {
            unreported = false;
            perform(update::Action::Export, state, backend);
        }
        if state.dirty && last_draw.elapsed() >= FRAME {
            terminal.draw(|f| view::render(f, state))?;
            state.dirty = false;
            last_draw = Instant::now();
        }
        if state.quit {
            return Ok(());
        }
        price_selected(state, backend);
        let redraw_in = FRAME.saturating_sub(last_draw.elapsed());
        tokio::select! {
            key = keys.next() => match key {
                Some(Ok(crossterm::event::Event::Key(k))) => {
                    for a in update::on_key(state, k) {
                        perform(a, state, backend);
                    }
                }
                Some(Ok(crossterm::event::Event::Resize(..))) => state.dirty = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(()),
            },
            ev = events.recv(), if events_open => match ev {
                Some(ev) => {
                    refresh_results |= update::apply(state, ev);
                    for _ in 0..MAX_EVENTS_PER_TURN {
                        match events.try_recv() {
                            Ok(ev) => {
                                refresh_results |= update::apply(state, ev);
                            }
                            Err(_) => break,
                        }
                    }
                }
                None => {
                    events_open = false;
                    // The workers are gone: nothing more to wait for.
                    if state.quitting.is_some() {
                        state.quit = true;
                    }
                }
            },
            _ = tick.tick() => {
                // ETAs move with time even when no event arrives.
                if state.running() {
                    state.dirty = true;
                }
                state.expire_status(std::time::Instant::now());
            }
            _ = tokio::time::sleep(redraw_in), if state.dirty => {}
        }
    }
}

/// The picker's selected file priced by a probe where it has no price,
/// and the picker's lines said again when a probe has ended.
fn price_selected(state: &mut AppState, backend: &mut dyn Backend) {
    let Overlay::Picker { files, selected } = &state.overlay else {
        return;
    };
    if backend.picker_stale() {
        perform(Action::OpenPicker, state, backend);
        return;
    }
    if let Some(entry) = files.get(*selected) {
        let entry = entry.clone();
        backend.price(&entry, state.picker_tiny);
    }
}

/// Reads the report again after a run ended: the Results, Ladder and
/// Tricks rows and the Effects of designed matrices, from one aggregation.
/// Only here, never while drawing: a frame only reads what this stored.
fn refresh(state: &mut AppState, backend: &mut dyn Backend) {
    match backend.results() {
        Ok(r) => state.set_reported(r),
        Err(e) => state.log(
            LogLevel::Warn,
            format!("results table: {}", crate::util::one_line(&e)),
        ),
    }
    state.dirty = true;
}

fn perform(a: Action, state: &mut AppState, backend: &mut dyn Backend) {
    match a {
        Action::Send(c) => backend.send(c),
        Action::Enqueue { path, tiny } => {
            state.status = match backend.enqueue(&path, tiny) {
                Ok(msg) => msg,
                Err(e) => format!("error: {}", crate::util::one_line(&e)),
            }
        }
        Action::OpenPicker => {
            // Reopened by `t`: the same file stays selected.
            let selected = match &state.overlay {
                Overlay::Picker { selected, .. } => *selected,
                _ => 0,
            };
            state.overlay = Overlay::Picker {
                files: backend.matrix_files(state.picker_tiny),
                selected,
            };
        }
        Action::Export => {
            state.status = match backend.export() {
                Ok(paths) if paths.is_empty() => "nothing to export yet".into(),
                Ok(paths) => format!(
                    "exported {} files to {}",
                    paths.len(),
                    paths[0]
                        .parent()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                ),
                Err(e) => format!("export failed: {}", crate::util::one_line(&e)),
            };
            state.log(LogLevel::Info, state.status.clone());
        }
    }
    state.dirty = true;
}

/// Restores the terminal however the UI ends: normal return, error, or panic
/// (ratatui's init installs a panic hook that restores too).
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Sets up the real terminal and runs the UI on a current-thread runtime.
pub fn run_terminal(
    mut state: AppState,
    backend: &mut dyn Backend,
    pump: Option<crate::session::Pump>,
) -> Result<()> {
    // Polars' lazy engine blocks in place, which a current-thread runtime forbids.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (tx, mut events) = tokio::sync::mpsc::channel(4096);
        // Events reach the UI only through the session's pump, stored first.
        if let Some(pump) = pump {
            tokio::spawn(async move {
                while let Some(ev) = pump.next().await {
                    if tx.send(ev).await.is_err() {
                        break;
                    }
                }
            });
        } else {
            drop(tx);
        }
        let mut terminal = ratatui::try_init()?;
        let _guard = TerminalGuard;
        // SIGTERM must not leave the terminal in raw mode.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = run_app(&mut terminal, &mut state, backend, &mut events) => r,
            _ = term.recv() => {
                backend.send(Command::CancelCurrent);
                backend.send(Command::Shutdown);
                Ok(())
            }
        }
    })
}

pub fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

#[derive(clap::Args, Debug)]
pub struct TuiArgs {
    /// Matrix files to queue (default: ablations/demo-ladder.toml).
    pub matrices: Vec<PathBuf>,
    /// Open finished results folders (browse only, no worker): several
    /// read as one report, so a ladder's rungs credit a design's factors
    /// beside its effects (the Effects screen's ladder Δ).
    #[arg(long, value_name = "FOLDER", num_args = 1..)]
    pub open: Vec<PathBuf>,
    /// Results root for new runs, as in `run`, `nightly` and `doctor`. (A
    /// finished folder here is opened as with --open, saying so: the flag
    /// used to mean that.)
    #[arg(long, alias = "results-root", default_value = "results")]
    pub results: PathBuf,
    /// Devices, one worker each: auto (every CUDA device, else the CPU), all,
    /// cuda:0,cuda:2, cuda:0-7, cpu, or cpu:N (N CPU workers sharing the
    /// cores). Runs with world_size N take gangs of N devices.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub devices: Vec<String>,
    /// Threads per CPU worker (default: the cores shared among the CPU
    /// workers), 1 to 4 × the cores. CPU numbers depend on it: oneDNN
    /// splits its sums by thread.
    #[arg(long, value_parser = crate::util::device::parse_cpu_threads)]
    pub cpu_threads: Option<usize>,
    /// Rehearse the matrices at CPU scale (`run --tiny`): their recipes'
    /// `tiny-` forms on the embedded data, into results/<matrix>-tiny/.
    #[arg(long)]
    pub tiny: bool,
    /// Continue a results folder in the TUI: its finished runs skipped.
    #[arg(long, value_name = "FOLDER")]
    pub resume: Option<PathBuf>,
    /// Queue even what the scale guard refuses (see `run --insist`).
    #[arg(long)]
    pub insist: bool,
    /// Run every matrix, those queued from the picker too, on this data set
    /// instead of its own (as `run --data`; `tricklab data list`).
    #[arg(long)]
    pub data: Option<String>,
}

impl TuiArgs {
    /// What `tricklab` with no arguments opens.
    pub fn default_args() -> TuiArgs {
        TuiArgs {
            matrices: Vec::new(),
            open: Vec::new(),
            results: PathBuf::from("results"),
            devices: vec!["auto".into()],
            cpu_threads: None,
            tiny: false,
            resume: None,
            insist: false,
            data: None,
        }
    }
}

/// The demo ladder, compiled in so that `tricklab` works from any folder.
pub const DEMO_LADDER: &str = include_str!("../../ablations/demo-ladder.toml");

pub fn cmd_tui(args: TuiArgs) -> anyhow::Result<i32> {
    if !args.open.is_empty() {
        return browse(args.open);
    }
    if crate::store::is_session(&args.results) {
        eprintln!(
            "note: --results names the results root, as in `run`; opening the finished folder {} (next time: `tricklab tui --open {}`)",
            args.results.display(),
            args.results.display()
        );
        return browse(vec![args.results]);
    }
    if args.resume.is_some() && args.data.is_some() {
        anyhow::bail!(
            "--data with --resume: a resumed folder keeps the data it was made with; drop --data"
        );
    }
    let rules = crate::session::Rules {
        tiny: args.tiny,
        data: args.data,
        insist: args.insist,
        ..Default::default()
    };
    // Nothing named: the picker, on the demo ladder, one Enter from its start
    // (nothing queued unasked). Outside a checkout, with no ablations/ to
    // pick from, the built-in demo ladder is queued as before.
    let demo_file = PathBuf::from("ablations/demo-ladder.toml");
    let mut pick = None;
    let matrices = if args.matrices.is_empty() && args.resume.is_none() {
        if demo_file.is_file() {
            pick = Some(demo_file);
            Vec::new()
        } else {
            let demo = crate::matrix::parse(DEMO_LADDER, "demo-ladder.toml (built in)")?;
            vec![rules.take(demo)?]
        }
    } else {
        // A resumed folder's own matrix comes back from its manifest.
        rules.load(&args.matrices)?
    };
    let opts = crate::session::SessionOptions {
        results_root: args.results,
        devices: crate::util::device::resolve_devices(&args.devices)?,
        resume: args.resume.clone(),
        keep_alive: true,
        min_free_bytes: crate::util::min_free_bytes(),
        cpu_threads: args.cpu_threads,
    };
    run_session(matrices, opts, rules, pick)
}

fn need_terminal() -> Result<()> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "the TUI needs a terminal; use `tricklab run MATRIX --headless` for progress bars"
        );
    }
    Ok(())
}

/// Runs matrices in the TUI, the session opened as `run` opens one. `rules`:
/// how matrices queued later from the picker are taken (`--tiny`, `--data`,
/// `--insist`, as the first ones were), on the session's devices.
/// The TUI over a session of `matrices`; `pick`: open on the picker with
/// that file selected.
pub fn run_session(
    matrices: Vec<crate::matrix::Matrix>,
    opts: crate::session::SessionOptions,
    rules: crate::session::Rules,
    pick: Option<PathBuf>,
) -> anyhow::Result<i32> {
    need_terminal()?;
    let devices = opts.devices.clone();
    let (session, estimates) =
        crate::session::Session::open(matrices, opts, &rules, crate::session::tch_factory())?;
    let rules = Rules {
        session: rules,
        devices,
    };
    let pump = session.pump();
    let mut state = AppState::new(no_color());
    state.picker_tiny = rules.session.tiny;
    for line in estimates {
        state.log(crate::events::LogLevel::Info, line);
    }
    let mut backend = backend::SessionBackend::new(session, rules);
    if let Some(p) = pick {
        state.overlay = picker_on(backend.matrix_files(state.picker_tiny), &p);
        state.status =
            "nothing queued yet: Enter queues the demo ladder, Esc closes, a reopens".into();
    }
    let result = run_terminal(state, &mut backend, Some(pump));
    let dirs = backend.finish();
    result?;
    crate::export::writeup::end_of_session(&dirs, &mut Said)?;
    Ok(0)
}

/// The picker over `files` with `want` selected (the first file where it is
/// not among them).
pub(crate) fn picker_on(files: Vec<state::PickerEntry>, want: &std::path::Path) -> Overlay {
    let selected = files
        .iter()
        .position(|f| std::path::Path::new(&f.path) == want)
        .unwrap_or(0);
    Overlay::Picker { files, selected }
}

/// On quit, the session's end (`export::writeup::end_of_session`), said
/// after the terminal is restored: each folder's report (Markdown and a
/// self-contained HTML page with the charts in it) and the command that
/// continues it.
struct Said;

impl crate::export::writeup::SessionEnd for Said {
    fn ended(
        &mut self,
        d: &std::path::Path,
        ending: crate::export::writeup::Ending,
    ) -> anyhow::Result<()> {
        use crate::export::writeup::Ending;
        let d = d.display();
        match ending {
            // A run cancelled on quit is recorded, but there is still
            // nothing to report; the folder is kept, its queue resumable,
            // and `report` passes it over for the newest with a finished run.
            Ending::NothingFinished => println!(
                "{d}: no run finished, nothing to report (`report` passes it over; continue: tricklab tui --resume {d})"
            ),
            Ending::Written(..) => println!(
                "results: {d}; report: {d}/report.md and report.html; continue: tricklab tui --resume {d}"
            ),
            Ending::NotWritten | Ending::Partly(_) => println!(
                "results: {d} (report not written whole: stopped; `tricklab report {d} --plots {d}` writes it); continue: tricklab tui --resume {d}"
            ),
            Ending::Failed(why) => println!(
                "results: {d} (report not written: {why}); continue: tricklab tui --resume {d}"
            ),
        }
        Ok(())
    }
}

fn browse(dirs: Vec<PathBuf>) -> anyhow::Result<i32> {
    need_terminal()?;
    let mut backend = backend::BrowseBackend::open(dirs.clone())?;
    let state = browse_state(&backend, &dirs, no_color());
    run_terminal(state, &mut backend, None)?;
    Ok(0)
}

/// What `tui --open` shows of finished folders before any key.
fn browse_state(backend: &backend::BrowseBackend, dirs: &[PathBuf], no_color: bool) -> AppState {
    let mut state = AppState::new(no_color);
    state.browse_only = true;
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    state.results_dir = Some(shown.join(", "));
    state.queue = backend.queue_items();
    state.tab = state::Tab::Results;
    // Live draws the stored curves: the last run to finish, or the one
    // selected on the Queue screen.
    let (series, warnings) = backend.stored_series();
    for w in warnings {
        state.log(LogLevel::Warn, w);
    }
    state.runs = series.into_iter().collect();
    state.current = state
        .queue
        .iter()
        .rev()
        .map(|q| &q.run)
        .find(|r| state.runs.contains_key(r))
        .cloned();
    state
}

#[cfg(test)]
mod tests;
