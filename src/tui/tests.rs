//! Snapshot tests of every screen on ratatui's TestBackend, and update-logic tests.

use super::state::*;
use super::update::{Action, apply, on_key};
use super::view::render;
use crate::events::*;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::path::PathBuf;

fn rid(variant: &str, index: usize, repeat: usize) -> RunId {
    RunId {
        matrix: "demo".into(),
        index,
        variant: variant.into(),
        repeat,
    }
}

/// A state with a bit of everything, deterministic (no clocks).
pub fn fixture(no_color: bool) -> AppState {
    let mut s = AppState::new(no_color);
    let variants = ["baseline", "+ label smoothing", "+ celu"];
    let mut queue = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        for r in 0..2 {
            let status = match (i, r) {
                (0, _) | (1, 0) => RunStatus::Done,
                (1, 1) => RunStatus::Failed,
                (2, 0) => RunStatus::Running,
                _ => RunStatus::Queued,
            };
            queue.push(QueueItem {
                run: rid(v, i, r),
                seed: r as u64,
                status,
                reason: None,
            });
        }
    }
    apply(&mut s, Event::Queue(queue));
    for (i, v) in variants.iter().enumerate() {
        let run = rid(v, i, 0);
        apply(
            &mut s,
            Event::RunStarted {
                run: run.clone(),
                seed: 0,
                config: std::sync::Arc::new(serde_json::json!({})),
                total_steps: 100,
                total_epochs: 4.0,
                target_acc: 0.6,
                device: "cpu".into(),
            },
        );
        let rows = (1..=60)
            .map(|k| StepRow {
                step: k,
                epoch: k as f64 / 25.0,
                loss: 2.3 * (-(k as f64) / (30.0 + 10.0 * i as f64)).exp() + 0.3,
                lr: 0.4 * (k as f64 / 60.0).min(1.0),
                bn_scale: vec![1.0 - k as f32 * 0.002, 1.0 + k as f32 * 0.001],
                bn_bias: vec![0.0, 0.01],
            })
            .collect();
        apply(
            &mut s,
            Event::Steps {
                run: run.clone(),
                rows,
                images_per_s: 1234.0,
            },
        );
        for e in 1..=2 {
            apply(
                &mut s,
                Event::Epoch {
                    run: run.clone(),
                    row: EpochRow {
                        epoch: e,
                        steps: 25 * e as u64,
                        train_loss: 1.0,
                        train_acc: 0.5,
                        test_acc: 0.3 + 0.1 * e as f64 + 0.02 * i as f64,
                        test_acc_tta: None,
                        train_s: 2.0,
                        eval_s: 0.5,
                        images_per_s: 1234.0,
                        peak_mem_bytes: Some(64 << 20),
                    },
                },
            );
        }
        s.runs.get_mut(&run).unwrap().started = None;
    }
    s.results = variants
        .iter()
        .enumerate()
        .map(|(i, v)| ResultRow {
            index: i,
            variant: v.to_string(),
            n: 2,
            acc_mean: 0.55 + 0.03 * i as f64,
            acc_ci95: 0.01,
            p_target: 0.5 * i as f64,
            ttt_mean: (i > 0).then_some(20.0 - 3.0 * i as f64),
            time_mean: 30.0 - 5.0 * i as f64,
            time_ci95: 0.8,
            speedup_prev: (i > 0)
                .then(|| (30.0 - 5.0 * (i as f64 - 1.0)) / (30.0 - 5.0 * i as f64)),
            speedup_first: (i > 0).then_some(30.0 / (30.0 - 5.0 * i as f64)),
        })
        .collect();
    s.log(
        LogLevel::Error,
        "demo/+ label smoothing#1 failed: loss became NaN at step 40",
    );
    s.status = String::new();
    s
}

fn screen(s: &AppState, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| render(f, s)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..h)
        .map(|y| {
            (0..w)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Compares with `tests/snapshots/NAME.txt`; `UPDATE_SNAPSHOTS=1` rewrites it.
fn snapshot(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing snapshot {}; run with UPDATE_SNAPSHOTS=1",
            path.display()
        )
    });
    assert_eq!(
        text, want,
        "screen {name} changed; inspect and run with UPDATE_SNAPSHOTS=1 if intended"
    );
}

#[test]
fn every_screen_matches_its_snapshot_small_and_large() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = fixture(true);
        for tab in Tab::ALL {
            s.tab = tab;
            snapshot(
                &format!("tui_{}_{w}x{h}", tab.title().to_lowercase()),
                &screen(&s, w, h),
            );
        }
        s.tab = Tab::Queue;
        s.overlay = Overlay::Help;
        snapshot(&format!("tui_help_{w}x{h}"), &screen(&s, w, h));
    }
}

#[test]
fn small_terminal_shows_key_facts() {
    let mut s = fixture(true);
    s.tab = Tab::Live;
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("loss (log)") && text.contains("eval accuracy") && text.contains("BN scale"),
        "{text}"
    );
    s.tab = Tab::Results;
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("+ celu") && text.contains("61.00 ± 1.00"),
        "{text}"
    );
}

#[test]
fn no_color_means_no_colour_at_all() {
    for no_color in [true, false] {
        let mut s = fixture(no_color);
        let mut coloured = false;
        for tab in Tab::ALL {
            s.tab = tab;
            let mut t = Terminal::new(TestBackend::new(100, 30)).unwrap();
            t.draw(|f| render(f, &s)).unwrap();
            coloured |= t
                .backend()
                .buffer()
                .content()
                .iter()
                .any(|c| c.fg != ratatui::style::Color::Reset);
        }
        assert_eq!(coloured, !no_color);
    }
}

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

#[test]
fn keys_become_commands() {
    let mut s = fixture(true);
    assert_eq!(
        on_key(&mut s, key(KeyCode::Char('p'))),
        vec![Action::Send(Command::Pause)]
    );
    apply(&mut s, Event::WorkerPaused(true));
    assert_eq!(
        on_key(&mut s, key(KeyCode::Char('p'))),
        vec![Action::Send(Command::Resume)]
    );
    assert_eq!(
        on_key(&mut s, key(KeyCode::Char('c'))),
        vec![Action::Send(Command::CancelCurrent)]
    );
    assert_eq!(
        on_key(&mut s, key(KeyCode::Char('e'))),
        vec![Action::Export]
    );
    // Requeue only a failed run: select row 3 (the failed one).
    s.tab = Tab::Queue;
    s.queue_selected = 0;
    assert!(on_key(&mut s, key(KeyCode::Char('r'))).is_empty());
    for _ in 0..3 {
        on_key(&mut s, key(KeyCode::Down));
    }
    assert_eq!(
        on_key(&mut s, key(KeyCode::Char('r'))),
        vec![Action::Send(Command::Requeue(rid(
            "+ label smoothing",
            1,
            1
        )))]
    );
    assert_eq!(
        on_key(&mut s, key(KeyCode::Char('K'))),
        vec![Action::Send(Command::Move {
            run: rid("+ label smoothing", 1, 1),
            up: true
        })]
    );
    // Tabs cycle, digits jump.
    on_key(&mut s, key(KeyCode::Tab));
    assert_eq!(s.tab, Tab::Live);
    on_key(&mut s, key(KeyCode::Char('5')));
    assert_eq!(s.tab, Tab::Tricks);
    // Quitting with a run in progress asks first.
    assert!(on_key(&mut s, key(KeyCode::Char('q'))).is_empty());
    assert_eq!(s.overlay, Overlay::ConfirmQuit);
    let a = on_key(&mut s, key(KeyCode::Char('y')));
    assert!(s.quit && a.contains(&Action::Send(Command::Shutdown)));
}

#[test]
fn events_update_progress_results_sort_and_decimation() {
    let mut s = fixture(true);
    let cur = s.current.clone().unwrap();
    assert_eq!(cur.variant, "+ celu");
    assert!((s.runs[&cur].progress() - 0.6).abs() < 1e-9);
    assert_eq!(s.runs[&cur].bn_scale.len(), 2);
    s.sort = SortKey::Time;
    assert_eq!(s.sorted_results()[0].variant, "+ celu");
    s.sort = SortKey::Accuracy;
    assert_eq!(s.sorted_results()[2].variant, "baseline");
    let mut v = Vec::new();
    for i in 0..5000 {
        push_decimated(&mut v, (i as f64, 0.0));
    }
    assert!(v.len() <= MAX_POINTS && v.len() > MAX_POINTS / 2);
    let finished = apply(
        &mut s,
        Event::RunFailed {
            run: cur.clone(),
            reason: "boom".into(),
        },
    );
    assert!(finished && s.log.last().unwrap().text.contains("boom"));
}
