//! Events and keys → state changes and requests to the outside world.

use super::state::{AppState, Overlay, RunSeries, Tab};
use crate::events::{Command, Event, LogLevel, RunStatus};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::time::Instant;

/// What the loop must do after a key, beyond changing state.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Send(Command),
    /// Queue the matrix file at this path, in its `--tiny` form if `tiny`.
    Enqueue {
        path: String,
        tiny: bool,
    },
    Export,
    /// Ask the backend for the matrix files it can queue, each as it would
    /// be queued with `AppState::picker_tiny` (opens or refreshes the picker).
    OpenPicker,
}

/// Applies one worker event. Returns true when the results table should be refreshed.
#[allow(
    clippy::too_many_lines,
    reason = "one arm per event: the state's whole reaction in one place"
)]
pub fn apply(state: &mut AppState, ev: Event) -> bool {
    state.dirty = true;
    match ev {
        Event::RunStarted {
            run,
            total_steps,
            total_epochs,
            target_acc,
            device,
            reference,
            record,
            ..
        } => {
            let clock = Some(record.clock());
            let loader_from = record.loader.clone();
            let now = Instant::now();
            let series = RunSeries {
                // A run that starts while the queue stands paused waits too.
                paused_since: state.paused.then_some(now),
                total_steps,
                total_epochs,
                target_acc,
                started: Some(now),
                device,
                reference,
                clock,
                loader_from,
                ..RunSeries::default()
            };
            state.runs.insert(run.clone(), series);
            state.current = Some(run);
            state.drained = false;
        }
        Event::Steps {
            run,
            rows,
            images_per_s,
            loader_share,
        } => {
            if let Some(s) = state.runs.get_mut(&run) {
                s.push_steps(&rows);
                s.images_per_s = images_per_s;
                s.loader_share = loader_share;
            }
        }
        Event::Epoch { run, row } => {
            if let Some(s) = state.runs.get_mut(&run) {
                s.push_epoch(row);
            }
        }
        Event::RunFinished { run, summary } => {
            let mut clock = crate::config::Clock::Dawn;
            if let Some(s) = state.runs.get_mut(&run) {
                s.finished = true;
                s.final_acc = Some(summary.acc_tta);
                clock = s.clock.unwrap_or(clock);
            }
            state.finished_wall.push(summary.clocks.wall_s);
            let c = &summary.clocks;
            let secs = c.on(clock);
            let paused = if c.paused_s > 0.0 {
                format!(" ({:.1} s paused, not counted)", c.paused_s)
            } else {
                String::new()
            };
            let noise = summary
                .noise
                .as_ref()
                .map(|n| format!("; noisy: {n}"))
                .unwrap_or_default();
            state.log(
                LogLevel::Info,
                format!(
                    "{run} finished: acc {:.2}% in {secs:.1} s on the {} clock{paused}{noise}",
                    100.0 * summary.acc_tta,
                    clock.name()
                ),
            );
            return true;
        }
        Event::RunFailed { run, reason } => {
            if let Some(s) = state.runs.get_mut(&run) {
                s.finished = true;
            }
            state.log(LogLevel::Error, format!("{run} failed: {reason}"));
            return true;
        }
        Event::RunCancelled { run } => {
            if let Some(s) = state.runs.get_mut(&run) {
                s.finished = true;
            }
            state.log(LogLevel::Warn, format!("{run} cancelled"));
        }
        Event::WorkerPaused(p) => {
            state.paused = p;
            let now = Instant::now();
            for r in state.runs.values_mut() {
                r.set_paused(p, now);
            }
            state.log(
                LogLevel::Info,
                if p { "queue paused" } else { "queue resumed" },
            );
        }
        Event::Log { level, message } => state.log(level, message),
        Event::Queue(items) => {
            state.queue = items;
            state.queue_selected = state
                .queue_selected
                .min(state.queue.len().saturating_sub(1));
        }
        Event::Drained => {
            state.drained = true;
            state.log(LogLevel::Info, "queue finished");
            if state.quitting.is_some() {
                state.quit = true;
            }
        }
    }
    false
}

/// Handles one key press.
#[allow(
    clippy::too_many_lines,
    reason = "one arm per key: the keymap in one place, as the help screen lists it"
)]
pub fn on_key(state: &mut AppState, key: KeyEvent) -> Vec<Action> {
    if key.kind == KeyEventKind::Release {
        return Vec::new();
    }
    state.dirty = true;
    if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
        state.quit = true;
        return vec![
            Action::Send(Command::CancelCurrent),
            Action::Send(Command::Shutdown),
        ];
    }
    if state.quitting.is_some() && matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
        state.quit = true;
        return vec![
            Action::Send(Command::CancelCurrent),
            Action::Send(Command::Shutdown),
        ];
    }
    match &mut state.overlay {
        Overlay::Help => {
            state.overlay = state.under_help.take().map_or(Overlay::None, |o| *o);
            return Vec::new();
        }
        Overlay::ConfirmQuit => {
            state.overlay = Overlay::None;
            // The UI stays up, saying what it waits for, until the worker stops
            // (`Drained`): a blank terminal for the seconds a step takes reads as a hang.
            return match key.code {
                KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Char('q') | KeyCode::Enter => {
                    state.quitting = Some("quitting: cancelling the run in progress…".into());
                    vec![
                        Action::Send(Command::CancelCurrent),
                        Action::Send(Command::Shutdown),
                    ]
                }
                KeyCode::Char('s') | KeyCode::Char('S') => {
                    state.quitting =
                        Some("quitting: stopping after the run in progress finishes…".into());
                    vec![Action::Send(Command::StopAfterCurrent)]
                }
                _ => Vec::new(),
            };
        }
        Overlay::Picker { files, selected } => {
            match key.code {
                KeyCode::Up | KeyCode::Char('k') => *selected = selected.saturating_sub(1),
                KeyCode::Down | KeyCode::Char('j') => {
                    *selected = (*selected + 1).min(files.len().saturating_sub(1))
                }
                KeyCode::Enter => {
                    let file = files.get(*selected).map(|e| e.path.clone());
                    state.overlay = Overlay::None;
                    let tiny = state.picker_tiny;
                    return file
                        .map(|path| Action::Enqueue { path, tiny })
                        .into_iter()
                        .collect();
                }
                // The files said again as their `--tiny` forms would queue
                // (or no longer): most shipped matrices need it on a CPU.
                KeyCode::Char('t') => {
                    state.picker_tiny = !state.picker_tiny;
                    return vec![Action::OpenPicker];
                }
                // The keys, over the picker: it comes back when they close.
                KeyCode::Char('?') => {
                    let picker = std::mem::replace(&mut state.overlay, Overlay::Help);
                    state.under_help = Some(Box::new(picker));
                }
                _ => state.overlay = Overlay::None,
            }
            return Vec::new();
        }
        Overlay::None => {}
    }
    let tab_index = Tab::ALL.iter().position(|t| *t == state.tab).unwrap_or(0);
    match key.code {
        KeyCode::Tab | KeyCode::Right => state.tab = Tab::ALL[(tab_index + 1) % Tab::ALL.len()],
        KeyCode::BackTab | KeyCode::Left => {
            state.tab = Tab::ALL[(tab_index + Tab::ALL.len() - 1) % Tab::ALL.len()]
        }
        KeyCode::Char(c @ '1'..='9') if (c as usize - '1' as usize) < Tab::ALL.len() => {
            state.tab = Tab::ALL[c as usize - '1' as usize]
        }
        KeyCode::Char('?') => state.overlay = Overlay::Help,
        KeyCode::Char('q') | KeyCode::Esc => {
            if state.running() && !state.browse_only {
                state.overlay = Overlay::ConfirmQuit;
            } else {
                state.quit = true;
                return vec![Action::Send(Command::Shutdown)];
            }
        }
        KeyCode::Char('e') => return vec![Action::Export],
        KeyCode::Char('o') => state.overlays = !state.overlays,
        KeyCode::Up | KeyCode::Char('k') => move_selection(state, -1),
        KeyCode::Down | KeyCode::Char('j') => move_selection(state, 1),
        // Sorting only changes the view: a finished folder is sorted too.
        KeyCode::Char('s') if state.tab == Tab::Results => state.sort = state.sort.next(),
        _ if state.browse_only => {}
        KeyCode::Char('p') => {
            return vec![Action::Send(if state.paused {
                Command::Resume
            } else {
                Command::Pause
            })];
        }
        KeyCode::Char('c') => return vec![Action::Send(Command::CancelCurrent)],
        KeyCode::Char('a') => return vec![Action::OpenPicker],
        KeyCode::Char('D') if state.tab == Tab::Queue => {
            // Every queued run of the selected run's matrix, in one step.
            let Some(item) = state.queue.get(state.queue_selected) else {
                return Vec::new();
            };
            let matrix = item.run.matrix.clone();
            let drop: Vec<Action> = state
                .queue
                .iter()
                .filter(|q| q.run.matrix == matrix && q.status == RunStatus::Queued)
                .map(|q| Action::Send(Command::Remove(q.run.clone())))
                .collect();
            state.status = format!("removed {} queued runs of {matrix}", drop.len());
            return drop;
        }
        KeyCode::Char('r') | KeyCode::Char('K') | KeyCode::Char('J') | KeyCode::Char('d')
            if state.tab == Tab::Queue =>
        {
            let Some(item) = state.queue.get(state.queue_selected) else {
                return Vec::new();
            };
            let run = item.run.clone();
            return match key.code {
                KeyCode::Char('r')
                    if matches!(item.status, RunStatus::Failed | RunStatus::Cancelled) =>
                {
                    vec![Action::Send(Command::Requeue(run))]
                }
                KeyCode::Char('r') => {
                    state.status = "only failed or cancelled runs can be requeued".into();
                    Vec::new()
                }
                KeyCode::Char('K') => {
                    state.queue_selected = state.queue_selected.saturating_sub(1);
                    vec![Action::Send(Command::Move { run, up: true })]
                }
                KeyCode::Char('J') => {
                    state.queue_selected =
                        (state.queue_selected + 1).min(state.queue.len().saturating_sub(1));
                    vec![Action::Send(Command::Move { run, up: false })]
                }
                _ => vec![Action::Send(Command::Remove(run))],
            };
        }
        _ => {}
    }
    Vec::new()
}

fn move_selection(state: &mut AppState, delta: i64) {
    // Counted before the match borrows the selection.
    let effect_rows = match state.tab {
        Tab::Effects => state.effect_rows().len(),
        _ => 0,
    };
    let (sel, len) = match state.tab {
        Tab::Effects => (&mut state.effects_selected, effect_rows),
        Tab::Queue => (&mut state.queue_selected, state.queue.len()),
        Tab::Results | Tab::Ladder => (&mut state.results_selected, state.results.len()),
        Tab::Tricks => (&mut state.tricks_selected, crate::tricks::CATALOG.len()),
        _ => return,
    };
    let max = len.saturating_sub(1) as i64;
    *sel = (*sel as i64 + delta).clamp(0, max) as usize;
    // Browsing a finished folder, Live shows the run selected here.
    if state.browse_only
        && state.tab == Tab::Queue
        && let Some(q) = state.queue.get(state.queue_selected)
        && state.runs.contains_key(&q.run)
    {
        state.current = Some(q.run.clone());
    }
}
