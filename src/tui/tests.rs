//! Snapshot tests of every screen on ratatui's TestBackend, and update-logic tests.

use super::sample::rid;
use super::state::*;
use super::update::{Action, apply, on_key};
use super::view::render;
use crate::events::*;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

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

/// Compares with `tests/snapshots/NAME.snap` (insta: `cargo insta review`,
/// or `INSTA_UPDATE=always`, after an intended change).
fn snapshot(name: &str, text: &str) {
    insta::with_settings!({
        snapshot_path => "../../tests/snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn every_screen_matches_its_snapshot_small_and_large() {
    for (w, h) in [(80, 24), (160, 48)] {
        let mut s = super::sample::sample_state(true);
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
fn a_run_that_reports_no_images_or_bn_scale_shows_neither_as_zero() {
    // A script run (its own code through the protocol) may send neither.
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Live;
    for r in s.runs.values_mut() {
        r.images_per_s = 0.0;
        r.bn_scale.clear();
    }
    let text = screen(&s, 100, 30);
    assert!(
        !text.contains(" img/s") && !text.contains("(0 layers)"),
        "{text}"
    );
    assert!(text.contains("BN scale mean|γ| (not reported)"), "{text}");
}

#[test]
fn small_terminal_shows_key_facts() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Live;
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("loss (log)") && text.contains("eval accuracy") && text.contains("BN scale"),
        "{text}"
    );
    s.tab = Tab::Results;
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("+ celu") && text.contains("61.00 [60.00, 62.00]"),
        "{text}"
    );
    // n = 1: no interval, and the n beside it.
    let row = text
        .lines()
        .find(|l| l.contains("+ label smoothing"))
        .unwrap();
    assert!(row.contains("58.00 ± –") && !row.contains("[57"), "{row}");
}

#[test]
fn live_draws_the_reference_and_other_seeds_until_o_hides_them() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Live;
    let on = screen(&s, 120, 40);
    assert!(
        on.contains("projected 75.0% vs 72.0% (previous rung «+ label smoothing», n=1)")
            && on.contains("─ previous rung mean of 1")
            && on.contains("• other seeds (1)"),
        "{on}"
    );
    let dots = |t: &str| t.matches('•').count();
    on_key(&mut s, key(KeyCode::Char('o')));
    let off = screen(&s, 120, 40);
    assert!(off.contains("o overlays: off"), "{off}");
    // The target line stays; the other seed's dots and the mean line go.
    assert!(dots(&off) < dots(&on), "{} vs {}", dots(&off), dots(&on));
    assert!(off.contains("projected 75.0%"), "{off}");
}

#[test]
fn projection_and_time_to_target_read_the_reference_runs() {
    let run = |accs: &[f64], finished: bool| RunSeries {
        acc: accs
            .iter()
            .enumerate()
            .map(|(i, &a)| ((i + 1) as f64, a))
            .collect(),
        epochs: accs
            .iter()
            .enumerate()
            .map(|(i, &a)| EpochRow {
                epoch: i + 1,
                steps: 10,
                train_loss: 1.0,
                train_acc: 0.5,
                test_acc: a,
                test_acc_tta: None,
                train_s: 2.0,
                eval_s: 0.1,
                images_per_s: 1.0,
                peak_mem_bytes: None,
                loader_s: 0.0,
                loader_images_per_s: None,
                ddp: None,
            })
            .collect(),
        target_acc: 0.5,
        finished,
        ..RunSeries::default()
    };
    let (a, b) = (run(&[0.3, 0.5, 0.7], true), run(&[0.2, 0.4, 0.6], true));
    let cur = run(&[0.35], false);
    // Their mean final 0.65, their mean at eval 1 0.25: 0.1 ahead → 0.75.
    let (p, r) = cur.projected_final(&[&a, &b]).unwrap();
    assert!(
        (p - 0.75).abs() < 1e-12 && (r - 0.65).abs() < 1e-12,
        "{p} {r}"
    );
    assert_eq!(cur.projected_final(&[]), None);
    assert_eq!(a.time_to_target(), Some(4.0));
    assert_eq!(b.time_to_target(), Some(6.0));
    assert_eq!(cur.time_to_target(), None);
    let m = mean_curve(&[&a.acc, &b.acc[..2]]);
    assert_eq!(m.len(), 2);
    assert!((m[1].1 - 0.45).abs() < 1e-12);
}

#[test]
fn no_color_means_no_colour_at_all() {
    for no_color in [true, false] {
        let mut s = super::sample::sample_state(no_color);
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
    let mut s = super::sample::sample_state(true);
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
        vec![Action::Send(Command::Requeue(super::sample::rid(
            "+ label smoothing",
            1,
            1
        )))]
    );
    assert_eq!(
        on_key(&mut s, key(KeyCode::Char('K'))),
        vec![Action::Send(Command::Move {
            run: super::sample::rid("+ label smoothing", 1, 1),
            up: true
        })]
    );
    // Tabs cycle, digits jump.
    on_key(&mut s, key(KeyCode::Tab));
    assert_eq!(s.tab, Tab::Live);
    on_key(&mut s, key(KeyCode::Char('5')));
    assert_eq!(s.tab, Tab::Tricks);
    // Quitting with a run in progress asks first; any other key stays, a second q
    // cancels and waits for the worker, a third quits at once.
    assert!(on_key(&mut s, key(KeyCode::Char('q'))).is_empty());
    assert_eq!(s.overlay, Overlay::ConfirmQuit);
    assert!(on_key(&mut s, key(KeyCode::Char('x'))).is_empty());
    assert!(!s.quit && s.overlay == Overlay::None);
    on_key(&mut s, key(KeyCode::Char('q')));
    let a = on_key(&mut s, key(KeyCode::Char('q')));
    assert!(!s.quit && s.quitting.is_some() && a.contains(&Action::Send(Command::Shutdown)));
    on_key(&mut s, key(KeyCode::Char('q')));
    assert!(s.quit);
}

#[test]
fn events_update_progress_results_sort_and_decimation() {
    let mut s = super::sample::sample_state(true);
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

#[test]
fn live_lists_each_busy_devices_run() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Live;
    assert!(
        !screen(&s, 120, 30).contains("workers"),
        "one worker: no list"
    );
    for (repeat, device) in [(1, "cuda:0"), (2, "cuda:1")] {
        apply(
            &mut s,
            Event::RunStarted {
                run: super::sample::rid("+ celu", 2, repeat),
                seed: repeat as u64,
                record: std::sync::Arc::new(super::sample::record(&super::sample::rid(
                    "+ celu", 2, repeat,
                ))),
                total_steps: 100,
                total_epochs: 4.0,
                target_acc: 0.6,
                device: device.into(),
                reference: None,
            },
        );
    }
    let text = screen(&s, 160, 30);
    let line = text.lines().find(|l| l.contains("workers")).expect(&text);
    assert!(
        line.contains("cuda:0: demo/+ celu#1 0%") && line.contains("cuda:1: demo/+ celu#2 0%"),
        "{line}"
    );
}

#[test]
fn one_run_shows_no_ci_and_axis_ends_differ() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Results;
    for r in &mut s.results {
        r.n = 1;
        r.acc_ci95 = f64::NAN;
        r.time_ci95 = f64::NAN;
    }
    let text = screen(&s, 120, 30);
    assert!(
        text.contains("± –") && !text.contains("± 0.00") && !text.contains("± NaN"),
        "{text}"
    );
    assert!(text.contains("acc % ± 95% CI"), "{text}");
    let labels = super::view::axis_labels_for_test(0.9995, 1.0005);
    assert_ne!(labels[0], labels[1], "{labels:?}");
}

#[test]
fn quitting_during_a_run_says_what_it_waits_for_until_the_worker_stops() {
    let key = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE);
    for (choice, want, command) in [
        (
            'y',
            "cancelling the run in progress",
            Command::CancelCurrent,
        ),
        (
            's',
            "stopping after the run in progress",
            Command::StopAfterCurrent,
        ),
    ] {
        let mut s = super::sample::sample_state(true);
        assert!(s.running());
        assert!(on_key(&mut s, key('q')).is_empty());
        assert_eq!(s.overlay, Overlay::ConfirmQuit);
        let actions = on_key(&mut s, key(choice));
        assert!(
            matches!(&actions[0], Action::Send(c) if *c == command),
            "{choice}"
        );
        assert!(!s.quit, "{choice}: the UI stays until the worker stops");
        let text = screen(&s, 100, 24);
        assert!(text.contains(want), "{choice}: {text}");
        apply(&mut s, Event::Drained);
        assert!(s.quit, "{choice}: exits once the worker stopped");
    }
}

#[test]
fn two_matrices_get_their_own_tables_with_clocks_and_deltas() {
    let mut s = super::sample::sample_state(true);
    let mut other = s.results[0].clone();
    other.matrix = "gpu-smoke".into();
    other.variant = "smoke rung".into();
    other.clock = "airbench";
    other.index = 0;
    s.results.insert(1, other);
    s.tab = Tab::Results;
    let text = screen(&s, 160, 30);
    let (demo, smoke) = (
        text.find("▸ demo").expect("demo's header"),
        text.find("▸ gpu-smoke").expect("gpu-smoke's header"),
    );
    // Every demo rung sits under demo's header, before gpu-smoke's.
    for v in ["baseline", "+ label smoothing", "+ celu"] {
        let at = text.find(v).unwrap();
        assert!(demo < at && at < smoke, "{v} out of its table:\n{text}");
    }
    assert!(text.contains("time (dawn/airbench)"), "{text}");
    assert!(text.contains("−5.00 [−6.10, −3.90]*"), "{text}");
    // The noisy run is marked in n, and so is a data-bound variant.
    assert!(text.contains("2!"), "{text}");
    assert!(!text.contains("2!~"), "{text}");
    s.results[2].data_bound = Some(0.3);
    let r = &s.results[2];
    let mark = format!("{}{}~", r.n, if r.noisy > 0 { "!" } else { "" });
    let text = screen(&s, 160, 30);
    assert!(text.contains(&mark), "{mark}: {text}");
    s.results[2].data_bound = None;
    s.tab = Tab::Ladder;
    let text = screen(&s, 160, 30);
    assert!(
        text.contains("dawn clock") || text.contains("airbench clock"),
        "{text}"
    );
    assert!(!text.contains("DAWNBench clock"), "{text}");
    assert!(text.contains("▸ gpu-smoke"), "{text}");
}

#[test]
fn a_cancelled_or_failed_run_is_never_a_reference() {
    let mut s = super::sample::sample_state(true);
    let running = rid("+ celu", 2, 1);
    let before = s.live_compare(&running);
    let (_, name, runs) = before.reference.clone().expect("the previous rung");
    assert_eq!((name.as_str(), runs.len()), ("+ label smoothing", 1));
    // The previous rung's one finished run is cancelled after all: no reference left.
    let prev = rid("+ label smoothing", 1, 0);
    s.runs.get_mut(&prev).unwrap().final_acc = None;
    apply(&mut s, Event::RunCancelled { run: prev });
    let after = s.live_compare(&running);
    assert!(after.reference.as_ref().is_none_or(|r| r.2.is_empty()));
}

#[test]
fn footer_messages_expire() {
    let mut s = AppState::new(true);
    let t0 = std::time::Instant::now();
    s.status = "queued 60 runs of page-ladder on cpu".into();
    assert!(!s.expire_status(t0));
    assert!(!s.expire_status(t0 + std::time::Duration::from_secs(3)));
    assert!(s.expire_status(t0 + std::time::Duration::from_secs(7)));
    assert!(s.status.is_empty());
}

#[test]
fn capital_d_removes_every_queued_run_of_the_matrix() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Queue;
    s.queue_selected = 0;
    let actions = on_key(&mut s, key(KeyCode::Char('D')));
    let queued = s
        .queue
        .iter()
        .filter(|q| q.status == RunStatus::Queued)
        .count();
    assert_eq!(actions.len(), queued);
    assert!(
        actions
            .iter()
            .all(|a| matches!(a, Action::Send(Command::Remove(_))))
    );
}

#[test]
fn the_tricks_tab_says_what_a_trick_bought_where_it_alone_changed() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Tricks;
    let at = |key: &str| {
        crate::tricks::CATALOG
            .iter()
            .position(|t| t.key == key)
            .unwrap()
    };
    s.tricks_selected = at("label_smoothing");
    let text = screen(&s, 200, 48);
    assert!(
        text.contains("measured: adding it, Δ −5.00 [−6.10, −3.90]* s (dawn clock)")
            && text.contains("in demo «+ label smoothing», 2026-11-25"),
        "{text}"
    );
    // The celu rung keeps label smoothing on both sides: it measures celu only.
    assert_eq!(s.measured("label_smoothing").len(), 1);
    assert_eq!(s.measured("celu")[0].variant, "+ celu");
    // Parameters read as values, not as Rust's debug text.
    s.tricks_selected = at("celu");
    let text = screen(&s, 200, 48);
    assert!(
        text.contains("celu.alpha = 0.075 ") && !text.contains("Float("),
        "{text}"
    );
    // Noisy runs behind a measured Δ are counted on its line.
    s.results[2].noisy = 2;
    let text = screen(&s, 200, 48);
    assert!(text.contains("n=2 (2 noisy) in demo «+ celu»"), "{text}");
    s.results[2].noisy = 0;
    assert!(!screen(&s, 200, 48).contains("noisy)"));
    // So is a data-bound variant's loader share.
    s.results[2].data_bound = Some(0.12);
    let text = screen(&s, 200, 48);
    assert!(text.contains("n=2 (data-bound: 12% loader)"), "{text}");
    s.results[2].data_bound = None;
    s.tricks_selected = at("cutout");
    let text = screen(&s, 200, 48);
    assert!(text.contains("measured: not yet"), "{text}");
    // Leave-one-out: the rung without the trick reads as removing it.
    let mut full = s.results[2].clone();
    full.variant = "all".into();
    full.matrix = "loo".into();
    let mut without = full.clone();
    without.variant = "- celu".into();
    without.tricks = vec!["label_smoothing".into()];
    without.delta_vs = Some("all".into());
    s.results.extend([full, without]);
    let m = s.measured("celu");
    assert_eq!(m.len(), 2);
    assert!(!m[1].added && m[1].matrix == "loo", "{m:?}");
}

/// The picker says what each file would queue, and on which devices, before
/// Enter; a file the session would refuse says why, in the list.
#[test]
fn the_picker_says_runs_and_devices_before_it_queues() {
    use super::backend::{Rules, picker_entry};
    use std::path::Path;
    let on = |devices: &[&str], tiny, insist, data: Option<&str>| Rules {
        session: crate::session::Rules {
            tiny,
            insist,
            data: data.map(String::from),
            ..Default::default()
        },
        devices: devices.iter().map(|d| d.to_string()).collect(),
    };
    let cpu = on(&["cpu"], false, false, None);
    let demo_path = Path::new("ablations/demo-ladder.toml");
    let demo = picker_entry(demo_path, &cpu, Some(&Default::default()), None);
    let runs = crate::matrix::load(Path::new("ablations/demo-ladder.toml"))
        .unwrap()
        .runs()
        .len();
    assert_eq!(
        demo.about,
        format!(
            "{runs} runs of tiny-page-resnet9 on cpu, no earlier runs on cpu: priced by a probe once no run is training (a probe beside a run would slow both), or now by `tricklab matrix show ablations/demo-ladder.toml --estimate cpu`"
        )
    );
    assert!(!demo.refused);
    // Earlier sessions' runs of the same matrix price it; before they are
    // read, the picker says so.
    let earlier = [(
        ("demo-ladder".to_string(), "embedded".to_string()),
        crate::store::EarlierRuns { mean_s: 30.0, n: 4 },
    )]
    .into();
    let priced = picker_entry(demo_path, &cpu, Some(&earlier), None);
    assert!(
        priced.about.ends_with(&format!(
            ", about {} (30 s a run over 4 earlier runs on cpu)",
            crate::matrix::human(30.0 * runs as f64)
        )),
        "{priced:?}"
    );
    let waiting = picker_entry(demo_path, &cpu, None, None);
    assert!(waiting.about.ends_with("pricing from earlier sessions…"));
    let page = Path::new("ablations/page-ladder.toml");
    let full = picker_entry(page, &cpu, None, None);
    assert!(
        full.refused
            && full.about.starts_with("refused: ")
            && full.about.contains("--tiny")
            && full.about.contains("`--data cifar10`"),
        "{full:?}"
    );
    let tiny = picker_entry(page, &on(&["cpu"], true, false, None), None, None);
    assert!(
        !tiny.refused && tiny.about.contains("on cpu (--tiny), "),
        "{tiny:?}"
    );
    // The picker admits as `run` does (`session::admit`): on data smaller
    // than a rung's batch it refuses with `run`'s own line.
    let small = on(&["cuda:0", "cuda:1"], false, false, Some("synthetic:200"));
    let refused = picker_entry(page, &small, Some(&Default::default()), None);
    assert!(
        refused.refused
            && refused.about.contains(
                "has batch_size 512 but data set `synthetic:200` gives it 200 training images"
            ),
        "{refused:?}"
    );
    // On GPUs with the data named (`--data`), a full-size matrix queues.
    let two = on(&["cuda:0", "cuda:1"], false, false, Some("synthetic:1024"));
    let gpu = picker_entry(page, &two, Some(&Default::default()), None);
    assert!(!gpu.refused, "{gpu:?}");
    assert!(
        gpu.about
            .contains("on cuda:0,cuda:1, no earlier runs on cuda:0"),
        "{gpu:?}"
    );
}

/// Without earlier runs the picker's probe prices a matrix: while it runs,
/// when it ends (with a busy machine's inflation), or why it failed.
#[test]
fn the_picker_prices_a_matrix_without_earlier_runs_by_its_probe() {
    use super::backend::{Probed, Rules, picker_entry};
    use std::path::Path;
    let cpu = Rules {
        devices: vec!["cpu".into()],
        ..Default::default()
    };
    let demo_path = Path::new("ablations/demo-ladder.toml");
    let runs = crate::matrix::load(demo_path).unwrap().runs().len();
    let none = Some(&Default::default());
    // Only a file that earlier runs do not price asks for a probe.
    assert!(picker_entry(demo_path, &cpu, none, None).unpriced);
    let earlier = [(
        ("demo-ladder".to_string(), "embedded".to_string()),
        crate::store::EarlierRuns { mean_s: 30.0, n: 4 },
    )]
    .into();
    assert!(!picker_entry(demo_path, &cpu, Some(&earlier), None).unpriced);
    assert!(!picker_entry(demo_path, &cpu, None, None).unpriced);
    let probing = picker_entry(demo_path, &cpu, none, Some(&Probed::Running));
    assert!(
        probing
            .about
            .ends_with(", no earlier runs on cpu: probing a step to price it…"),
        "{probing:?}"
    );
    let mut e = crate::matrix::Estimate {
        runs,
        device: "cpu".into(),
        step_s: 0.09,
        batch: 128,
        probe_batch: 128,
        probe_steps: 5,
        eval_s: 0.24,
        overhead_s: 1.2,
        total_s: 82.0,
        total_range_s: (77.0, 119.0),
        other_cpu: Some(0.0),
        stalls: 1.0,
    };
    let probed = picker_entry(demo_path, &cpu, none, Some(&Probed::Done(e.clone())));
    assert!(
        probed
            .about
            .ends_with(", about 82 s (probed: 0.09 s a step at batch 128 on cpu)"),
        "{probed:?}"
    );
    e.other_cpu = Some(0.6);
    e.total_s = 600.0;
    let busy = picker_entry(demo_path, &cpu, none, Some(&Probed::Done(e)));
    assert!(
        busy.about.ends_with(
            ", about 10 min (probed: 0.09 s a step at batch 128 on cpu; the machine was busy: idle, ×2.5 less at least, 4 min or less)"
        ),
        "{busy:?}"
    );
    let failed = picker_entry(
        demo_path,
        &cpu,
        none,
        Some(&Probed::Failed("no net".into())),
    );
    assert!(
        failed.about.ends_with("and its probe failed: no net"),
        "{failed:?}"
    );
}

/// The picker draws one line a file and, wrapped below, the selected file's
/// runs or refusal; Enter queues the selected file by its path.
#[test]
fn the_picker_fits_80x24_and_enter_queues_the_selected_path() {
    use super::backend::{Rules, picker_entry};
    use std::path::Path;
    let cpu = Rules {
        devices: vec!["cpu".into()],
        ..Default::default()
    };
    let runs = crate::matrix::load(Path::new("ablations/demo-ladder.toml"))
        .unwrap()
        .runs()
        .len();
    let demo = picker_entry(
        Path::new("ablations/demo-ladder.toml"),
        &cpu,
        Some(&Default::default()),
        None,
    );
    let full = picker_entry(Path::new("ablations/page-ladder.toml"), &cpu, None, None);
    let mut s = super::sample::sample_state(true);
    let files = vec![demo, full];
    let pick = |selected| Overlay::Picker {
        files: files.clone(),
        selected,
    };
    s.overlay = pick(0);
    // The selected file's line, wrapped, even on an 80×24 terminal.
    let text = screen(&s, 80, 24);
    assert!(
        text.contains(&format!("{runs} runs of tiny-page-resnet9 on cpu"))
            && text.contains("ablations/page-ladder.toml")
            && text.contains("--estimate cpu`"),
        "{text}"
    );
    s.overlay = pick(1);
    assert!(screen(&s, 80, 24).contains("refused: "));
    s.overlay = pick(0);
    // Enter queues the selected file by its path.
    let acts = on_key(&mut s, KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
    assert_eq!(
        acts,
        vec![Action::Enqueue {
            path: "ablations/demo-ladder.toml".into(),
            tiny: false
        }]
    );
}

/// Most shipped matrices are refused on a CPU unless rehearsed with
/// --tiny: `t` in the picker asks for the files again in their tiny forms,
/// keeps the selection, says so in the title, and Enter queues the tiny form.
#[test]
fn t_in_the_picker_switches_the_tiny_form_and_enter_queues_it() {
    use super::backend::{Rules, picker_entry};
    use std::path::Path;
    let page = Path::new("ablations/page-ladder.toml");
    let mut s = super::sample::sample_state(true);
    let entry = |tiny| {
        let rules = Rules {
            devices: vec!["cpu".into()],
            ..Default::default()
        }
        .tiny(tiny);
        picker_entry(page, &rules, None, None)
    };
    s.overlay = Overlay::Picker {
        files: vec![entry(false)],
        selected: 0,
    };
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("t tiny (off)") && text.contains("(t here: rehearse its --tiny"),
        "{text}"
    );
    // A file that does not parse is not offered t: its tiny form fails too.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        "name = 'b'\nrecipe = 'tiny-page-resnet9'\nkind = 'ladder\n",
    )
    .unwrap();
    let b = picker_entry(
        &broken,
        &Rules {
            devices: vec!["cpu".into()],
            ..Default::default()
        },
        None,
        None,
    );
    assert!(b.refused && !b.about.contains("t here"), "{}", b.about);
    assert_eq!(
        on_key(&mut s, key(KeyCode::Char('t'))),
        vec![Action::OpenPicker]
    );
    assert!(s.picker_tiny);
    // The loop answers OpenPicker with the files as the tiny forms queue.
    s.overlay = Overlay::Picker {
        files: vec![entry(s.picker_tiny)],
        selected: 0,
    };
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("t tiny (on)") && !text.contains("refused"),
        "{text}"
    );
    let acts = on_key(&mut s, key(KeyCode::Enter));
    assert_eq!(
        acts,
        vec![Action::Enqueue {
            path: "ablations/page-ladder.toml".into(),
            tiny: true
        }]
    );
    // `t` again switches it off for the next pick.
    s.overlay = Overlay::Picker {
        files: vec![entry(true)],
        selected: 0,
    };
    on_key(&mut s, key(KeyCode::Char('t')));
    assert!(!s.picker_tiny);
}

/// At 80×24 (a tmux pane) every screen's footer keeps `? help` and
/// `q quit`, and the Live header is whole: what does not fit goes on to a
/// line of its own rather than being cut.
#[test]
fn at_80x24_the_footer_keeps_help_and_quit_and_the_live_header_is_whole() {
    let mut s = super::sample::sample_state(true);
    for tab in Tab::ALL {
        s.tab = tab;
        let text = screen(&s, 80, 24);
        let last = text.lines().last().unwrap();
        assert!(
            last.contains("? help") && last.contains("q quit"),
            "{tab:?}: {last}"
        );
    }
    s.tab = Tab::Queue;
    let last = screen(&s, 80, 24).lines().last().unwrap().to_string();
    assert!(
        last.contains("a add") && last.contains("p pause/resume"),
        "{last}"
    );
    // Wide enough, nothing is dropped.
    let wide = screen(&s, 200, 24);
    assert!(
        wide.contains("D remove matrix  e export  ? help  q quit"),
        "{wide}"
    );
    s.tab = Tab::Live;
    let text = screen(&s, 80, 24);
    for part in [
        "step 60/100",
        "peak mem 64 MiB",
        "demo/+ celu#1 on cpu",
        "projected 75.0% vs 72.0% (previous rung «+ label smoothing», n=1)",
        "target 60.0%: ",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert!(
        text.contains("loss (log)") && text.contains("eval accuracy"),
        "{text}"
    );
    // A target out of reach: "not yet" while the run trains, "missed" once
    // it has finished without reaching it.
    let id = s.current.clone().unwrap();
    s.runs.get_mut(&id).unwrap().target_acc = 0.99;
    assert!(screen(&s, 160, 45).contains("target 99.0%: not yet"));
    s.runs.get_mut(&id).unwrap().finished = true;
    let text = screen(&s, 160, 45);
    assert!(text.contains("target 99.0%: missed"), "{text}");
    s.runs.get_mut(&id).unwrap().finished = false;
    assert_eq!(
        super::view::pack(&["ab".into(), "cd".into(), "efgh".into()], "  ", 6),
        ["ab  cd", "efgh"]
    );
    assert_eq!(
        super::view::fit_keys(&["a add", "p pause/resume", "c cancel"], 31),
        "a add  c cancel  ? help  q quit"
    );
    assert_eq!(
        super::view::fit_keys(&["a add", "p pause/resume", "c cancel"], 30),
        "a add  ? help  q quit"
    );
}

/// The help lists every key the footers name: D and the picker's t too.
#[test]
fn help_lists_capital_d_and_the_pickers_t() {
    let mut s = super::sample::sample_state(true);
    s.overlay = Overlay::Help;
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("D   remove every queued run of its matrix")
            && text.contains("t   in the picker: its --tiny form on/off")
            && text.contains("any key closes this help"),
        "{text}"
    );
}

/// A paused run's ETA stands still: the time it stood paused is not
/// training time, so its step rate does not fall while it waits.
#[test]
fn the_eta_stands_still_while_paused() {
    use std::time::Duration;
    let mut s = AppState::new(true);
    let run = rid("a", 0, 0);
    apply(
        &mut s,
        Event::Queue(vec![QueueItem {
            run: run.clone(),
            seed: 0,
            status: RunStatus::Running,
            reason: None,
        }]),
    );
    apply(
        &mut s,
        Event::RunStarted {
            run: run.clone(),
            seed: 0,
            record: std::sync::Arc::new(super::sample::record(&run)),
            total_steps: 100,
            total_epochs: 1.0,
            target_acc: 0.6,
            device: "cpu".into(),
            reference: None,
        },
    );
    let back = |s: &mut AppState, d: Duration| {
        let r = s.runs.get_mut(&run).unwrap();
        r.started = r.started.map(|t| t - d);
        r.paused_since = r.paused_since.map(|t| t - d);
    };
    s.runs.get_mut(&run).unwrap().step = 50;
    back(&mut s, Duration::from_secs(10));
    let eta = |s: &AppState| s.runs[&run].eta_s().unwrap();
    assert!((eta(&s) - 10.0).abs() < 0.5, "{}", eta(&s));
    apply(&mut s, Event::WorkerPaused(true));
    // A minute paused: the run's ETA and the queue's stay where they were.
    back(&mut s, Duration::from_secs(60));
    assert!((eta(&s) - 10.0).abs() < 0.5, "{}", eta(&s));
    assert!((s.queue_eta().1.unwrap() - 10.0).abs() < 0.5);
    s.tab = Tab::Live;
    assert!(screen(&s, 120, 30).contains("(paused)"));
    apply(&mut s, Event::WorkerPaused(false));
    assert!(s.runs[&run].paused_since.is_none());
    assert!((eta(&s) - 10.0).abs() < 0.5, "{}", eta(&s));
    assert!(s.runs[&run].paused_total >= Duration::from_secs(60));
}

/// The footer's ETA is there from the first step: before any run has
/// finished, the run in progress's projected length prices the queued ones.
#[test]
fn the_queue_eta_shows_before_the_first_run_finishes() {
    let mut s = AppState::new(true);
    let queue = (0..4)
        .map(|r| QueueItem {
            run: rid("a", 0, r),
            seed: r as u64,
            status: if r == 0 {
                RunStatus::Running
            } else {
                RunStatus::Queued
            },
            reason: None,
        })
        .collect();
    apply(&mut s, Event::Queue(queue));
    apply(
        &mut s,
        Event::RunStarted {
            run: rid("a", 0, 0),
            seed: 0,
            record: std::sync::Arc::new(super::sample::record(&rid("a", 0, 0))),
            total_steps: 100,
            total_epochs: 1.0,
            target_acc: 0.6,
            device: "cpu".into(),
            reference: None,
        },
    );
    // Before its first step nothing can be said.
    assert_eq!(s.queue_eta(), (3, None));
    let r = s.runs.get_mut(&rid("a", 0, 0)).unwrap();
    r.started = Some(std::time::Instant::now() - std::time::Duration::from_secs(10));
    r.step = 50;
    // 10 s for half the run: 10 s left of a 20 s run, then 3 runs of 20 s.
    let (left, eta) = s.queue_eta();
    assert_eq!(left, 3);
    assert!((eta.unwrap() - 70.0).abs() < 1.0, "{eta:?}");
    // Once a run has finished, the finished runs' mean prices the rest.
    s.finished_wall.push(30.0);
    assert!((s.queue_eta().1.unwrap() - 100.0).abs() < 1.0);
}

/// A rung measured once says so in full in the Results table's Δ column.
#[test]
fn a_single_run_delta_is_not_cut_short() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Results;
    s.results[1].delta_time = Some(crate::report::delta::Delta {
        mean: -0.33,
        lo: f64::NAN,
        hi: f64::NAN,
        n: 1,
        paired: true,
    });
    let text = screen(&s, 160, 48);
    assert!(text.contains("−0.33 (n=1: no interval)"), "{text}");
}

/// `tui --open` draws a finished folder's stored curves on Live (the last
/// run to finish first), not "no run has started yet"; ↓ on the Queue
/// screen picks the run Live draws.
#[test]
fn open_draws_the_stored_curves_of_the_selected_run() {
    use crate::store::tests::{feed, rid as srid, summary};
    let root = tempfile::tempdir().unwrap();
    let mut w = crate::store::ResultsWriter::create(root.path(), "demo", "name = 'x'").unwrap();
    feed(
        &mut w,
        srid("a", 0, 0),
        0,
        Some(summary(0.6, 1.0, Some(0.5))),
    );
    feed(
        &mut w,
        srid("b", 1, 0),
        0,
        Some(summary(0.7, 1.0, Some(0.5))),
    );
    let dir = w.dir().to_path_buf();
    drop(w);
    let backend = super::backend::BrowseBackend::open(vec![dir.clone()]).unwrap();
    let mut s = super::browse_state(&backend, std::slice::from_ref(&dir), true);
    assert_eq!(s.runs.len(), 2);
    assert_eq!(s.current, Some(srid("b", 1, 0)));
    let run = &s.runs[&srid("b", 1, 0)];
    assert_eq!(
        (run.loss.len(), run.acc.len(), run.bn_scale.len()),
        (3, 1, 2)
    );
    assert!((run.final_acc.unwrap() - 0.71).abs() < 1e-9);
    s.tab = Tab::Live;
    let text = screen(&s, 100, 30);
    assert!(
        !text.contains("no run has started yet")
            && text.contains("m/b#0 on cpu")
            && text.contains("loss (log)")
            && text.contains("eval accuracy 40.0%"),
        "{text}"
    );
    // The Queue screen's selection picks the run Live draws.
    s.tab = Tab::Queue;
    s.queue_selected = 1;
    on_key(&mut s, key(KeyCode::Up));
    assert_eq!(s.current, Some(srid("a", 0, 0)));
    // A folder with no finished run says so on Live.
    let mut empty = AppState::new(true);
    empty.browse_only = true;
    empty.tab = Tab::Live;
    assert!(screen(&empty, 100, 30).contains("no finished run in this folder"));
}

/// The Live header names the loader's share of the steps' time (flagged
/// data-bound past 5%) and the streaming loader's rate; a run fed from the
/// device waits for nothing and shows neither.
#[test]
fn the_live_header_shows_the_loader_wait_and_rate() {
    use super::state::RunSeries;
    use super::view::loader_part;
    let mut s = RunSeries::default();
    assert_eq!(loader_part(&s), None);
    s.loader_share = 0.12;
    s.loader_images_per_s = Some(3400.0);
    assert_eq!(
        loader_part(&s).as_deref(),
        Some("loader 12% wait (data-bound), 3400 img/s")
    );
    s.loader_share = 0.02;
    s.loader_images_per_s = None;
    assert_eq!(loader_part(&s).as_deref(), Some("loader 2%"));
    // A streamed run says where it decodes and what it reads.
    s.loader_from = Some("cpu decode from an image folder".into());
    assert_eq!(
        loader_part(&s).as_deref(),
        Some("loader 2% (cpu decode from an image folder)")
    );
}

/// A data-parallel run's Live header gives the gradient all-reduce a step
/// and its exposed part, by DDP's clock as of the last epoch.
#[test]
fn the_live_header_shows_ddps_all_reduce_and_what_the_backward_left_exposed() {
    use super::state::RunSeries;
    use super::view::ddp_part;
    let mut s = RunSeries::default();
    let mut row = EpochRow {
        epoch: 1,
        steps: 3,
        train_loss: 1.0,
        train_acc: 0.5,
        test_acc: 0.4,
        test_acc_tta: None,
        train_s: 1.0,
        eval_s: 0.1,
        images_per_s: 10.0,
        peak_mem_bytes: None,
        loader_s: 0.0,
        loader_images_per_s: None,
        ddp: None,
    };
    s.push_epoch(row.clone());
    assert_eq!(ddp_part(&s), None);
    row.ddp = Some(crate::config::DdpTimes {
        backward_s: 0.020,
        allreduce_s: 0.0125,
        hidden_s: 0.0095,
    });
    s.push_epoch(row);
    assert_eq!(
        ddp_part(&s).as_deref(),
        Some("all-reduce 12.5 ms/step (3.0 exposed)")
    );
}

/// A designed matrix's results folder for the Effects tests: runs fed
/// through the store as a session records them, with planted effects (the
/// first factor +4 points and +2 s, the second −2 points) and seed noise.
struct Designed {
    configs: Vec<u32>,
    names: Vec<String>,
    w: crate::store::ResultsWriter,
    rng: crate::util::splitmix::SplitMix64,
}

impl Designed {
    fn new(root: &std::path::Path, text: &str) -> Designed {
        let m = crate::matrix::parse(text, "m.toml").unwrap();
        Designed {
            configs: m.design.as_ref().unwrap().configs.clone(),
            names: m.variants.iter().map(|v| v.name.clone()).collect(),
            w: crate::store::ResultsWriter::create(root, "m", text).unwrap(),
            rng: crate::util::splitmix::SplitMix64(7),
        }
    }

    /// Repeat `rep` of the variants `idx`; each run's summary.
    fn feed(&mut self, rep: usize, idx: std::ops::Range<usize>) -> Vec<(RunId, RunSummary)> {
        use crate::store::tests as st;
        let mut done = Vec::new();
        for i in idx {
            let c = self.configs[i];
            let (a, b) = (f64::from(c & 1), f64::from(c >> 1 & 1));
            let acc = 0.5 + 0.04 * a - 0.02 * b + 0.004 * (self.rng.unit_f64() - 0.5);
            // summary(): the airbench clock is 0.9 × the dawn one.
            let secs = (10.0 + 2.0 * a + 0.02 * (self.rng.unit_f64() - 0.5)) / 0.9;
            let (run, sum) = (
                st::rid(&self.names[i], i, rep),
                st::summary(acc, secs, None),
            );
            st::feed(&mut self.w, run.clone(), rep as u64, Some(sum.clone()));
            done.push((run, sum));
        }
        done
    }

    fn dir(&self) -> std::path::PathBuf {
        self.w.dir().to_path_buf()
    }
}

const FACTORIAL: &str = "name = \"m\"\nrecipe = \"tiny-airbench94\"\nkind = \"factorial\"\nrepeats = 2\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n";

/// The Effects screen of a finished 2^3 factorial with two seeds, at 80×24
/// (cut and scrolled) and 160×45 (whole, wider bars): the design, each
/// response's effects with their intervals and the Shapley values.
#[test]
fn the_effects_tab_shows_a_designed_folders_effects_small_and_large() {
    let root = tempfile::tempdir().unwrap();
    let mut d = Designed::new(root.path(), FACTORIAL);
    for rep in 0..2 {
        d.feed(rep, 0..8);
    }
    let mut backend = super::backend::BrowseBackend::open(vec![d.dir()]).unwrap();
    let mut s = AppState::new(true);
    s.browse_only = true;
    super::refresh(&mut s, &mut backend);
    assert_eq!(s.effects.len(), 1);
    // The folder's name has the session's time in it: a fixed one to draw.
    s.effects[0].folder = "results/m/20261126-120000".into();
    on_key(&mut s, key(KeyCode::Char('7')));
    assert_eq!(s.tab, Tab::Effects);
    let small = screen(&s, 80, 24);
    snapshot("tui_effects_factorial_80x24", &small);
    let large = screen(&s, 160, 45);
    snapshot("tui_effects_factorial_160x45", &large);
    // Every line fits at 160×45; the planted effects are there and decided.
    assert!(!large.contains(" of 27"), "{large}");
    let line = |text: &str, start: &str, after: &str| -> String {
        let from = text
            .find(after)
            .unwrap_or_else(|| panic!("{after}: {text}"));
        text[from..]
            .lines()
            .find(|l| l.trim_start_matches('│').trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("{start} after {after}: {text}"))
            .to_string()
    };
    let tta_time = line(&large, "tta ", "time (s, high − low)");
    assert!(
        tta_time.contains("+2.0") && tta_time.contains("]*"),
        "{tta_time}"
    );
    let tta_acc = line(&large, "tta ", "accuracy (points, high − low)");
    assert!(
        tta_acc.contains("+4.0") && tta_acc.contains("]*"),
        "{tta_acc}"
    );
    let la_acc = line(&large, "lookahead ", "accuracy (points");
    assert!(la_acc.contains("−2.0") && la_acc.contains("]*"), "{la_acc}");
    // Accuracy's largest effect fills its side of the bar; a smaller one less.
    let full = |l: &str| l.matches('█').count();
    assert!(
        full(&tta_acc) > full(&la_acc) && full(&la_acc) > 0,
        "{large}"
    );
    assert!(
        large.contains("Exact Shapley values over all 2^3")
            && large.contains("95% t intervals on 8 df"),
        "{large}"
    );
    // At 80×24 the tail is below: ↓ brings it up, and stops at the last line.
    assert!(small.contains("1–15 of 27"), "{small}");
    let shapley_heads = |t: &str| t.matches("Shapley value   ").count();
    assert_eq!(shapley_heads(&small), 1, "{small}");
    for _ in 0..50 {
        on_key(&mut s, key(KeyCode::Down));
    }
    assert_eq!(s.effects_selected, 26);
    let end = screen(&s, 80, 24);
    assert!(end.contains("–27 of 27"), "{end}");
    assert_eq!(shapley_heads(&end), 2, "{end}");
    // The last line, the third factor's Shapley value for accuracy, at the bottom.
    let last = end.lines().nth(20).unwrap();
    assert!(last.contains("│  label_smoothing "), "{end}");
    on_key(&mut s, key(KeyCode::Char('k')));
    assert_eq!(s.effects_selected, 25);
}

/// The Effects screen fills in when a run ends (the refresh that follows a
/// `RunFinished`, as for the Results table) and not while drawing: a frame
/// drawn after more runs were recorded still shows what the last refresh read.
#[test]
fn the_effects_tab_fills_in_as_runs_finish_not_per_frame() {
    let root = tempfile::tempdir().unwrap();
    let mut d = Designed::new(root.path(), FACTORIAL);
    d.feed(0, 0..3);
    let mut backend = super::backend::BrowseBackend::open(vec![d.dir()]).unwrap();
    let mut s = AppState::new(true);
    s.tab = Tab::Effects;
    assert!(
        screen(&s, 80, 24).contains("no finished runs yet: a designed matrix's effects fill in"),
        "{}",
        screen(&s, 80, 24)
    );
    super::refresh(&mut s, &mut backend);
    let partial = screen(&s, 160, 45);
    assert!(
        partial.contains("▸ m: 3 runs") && partial.contains("note: effects:"),
        "{partial}"
    );
    let mut finished = d.feed(0, 3..8);
    finished.extend(d.feed(1, 0..8));
    assert_eq!(
        screen(&s, 160, 45),
        partial,
        "a frame must not read the folder"
    );
    let (run, summary) = finished.pop().unwrap();
    assert!(apply(&mut s, Event::RunFinished { run, summary }));
    super::refresh(&mut s, &mut backend);
    let full = screen(&s, 160, 45);
    assert!(
        full.contains("▸ m: 16 runs") && !full.contains("note:") && full.contains("Shapley value"),
        "{full}"
    );
}

/// Where there is no designed matrix the screen says how to get one; a
/// fraction's estimates name what they are aliased with, at 80 columns too.
#[test]
fn the_effects_tab_says_how_to_get_a_design_and_shows_a_fractions_aliases() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Effects;
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("no factorial, fractional or shapley matrix in these results")
            && text.contains("ablations/README.md, Kinds"),
        "{text}"
    );
    let root = tempfile::tempdir().unwrap();
    let mut d = Designed::new(
        root.path(),
        "name = \"m\"\nrecipe = \"tiny-airbench94\"\nkind = \"fractional\"\nfraction = 1\nrepeats = 2\nvary = [\"tta\", \"lookahead\", \"label_smoothing\", \"whitening_bias\"]\n",
    );
    for rep in 0..2 {
        d.feed(rep, 0..8);
    }
    let mut backend = super::backend::BrowseBackend::open(vec![d.dir()]).unwrap();
    super::refresh(&mut s, &mut backend);
    assert!(screen(&s, 80, 24).contains("resolution IV"));
    // The time table's tta×lookahead, selected so that it is in sight at 80×24.
    s.effects_selected = s
        .effect_rows()
        .iter()
        .position(|r| matches!(r, EffectRow::Term { x, .. } if x.term == "tta×lookahead"))
        .unwrap();
    for (w, h) in [(80, 24), (160, 45)] {
        let text = screen(&s, w, h);
        let row = text
            .lines()
            .find(|l| l.contains("  tta×lookahead ") && l.contains(']'))
            .unwrap_or_else(|| panic!("{text}"));
        // Cut at 80 columns, whole at 160.
        let alias = if w == 80 {
            "label_smoothing×whitening_bi…"
        } else {
            "label_smoothing×whitening_bias"
        };
        assert!(row.contains(alias), "{w}x{h}: {row}");
        assert!(text.contains("aliased with"), "{text}");
    }
    // A fraction has no Shapley values, and says why.
    s.effects_selected = s.effect_rows().len() - 1;
    let text = screen(&s, 160, 45);
    assert!(
        text.contains("note: shapley: a fraction does not run every configuration"),
        "{text}"
    );
}

/// A Shapley matrix: its design line says what its shared rungs save, and
/// its tables are Shapley values only (from the sampled orders).
#[test]
fn a_shapley_matrix_shows_its_savings_and_its_shapley_values() {
    let root = tempfile::tempdir().unwrap();
    let text = "name = \"m\"\nrecipe = \"tiny-airbench94\"\nkind = \"shapley\"\norders = 6\nvary = [\"tta\", \"lookahead\", \"label_smoothing\"]\n";
    let mut d = Designed::new(root.path(), text);
    let n = d.names.len();
    d.feed(0, 0..n);
    let mut backend = super::backend::BrowseBackend::open(vec![d.dir()]).unwrap();
    let mut s = AppState::new(true);
    s.tab = Tab::Effects;
    super::refresh(&mut s, &mut backend);
    let text = screen(&s, 160, 45);
    assert!(
        text.contains("shapley: 6 random orders") && text.contains("saved)"),
        "{text}"
    );
    assert!(
        text.contains("Shapley values from 6 sampled orders") && !text.contains("  term "),
        "{text}"
    );
    let tta = text
        .lines()
        .filter(|l| l.contains("│  tta "))
        .map(|l| l.to_string())
        .collect::<Vec<_>>();
    assert_eq!(tta.len(), 2, "one a response: {text}");
    // Accuracy's: the planted 4 points, within the seed noise.
    let points: f64 = tta[1]
        .split_whitespace()
        .nth(2)
        .unwrap()
        .replace('−', "-")
        .parse()
        .unwrap();
    assert!((points - 4.0).abs() < 0.3 && tta[1].contains('['), "{text}");
}

/// A factorial opened with a ladder whose rung adds tta alone (`tui --open
/// FACTORIAL LADDER`): tta's main effect and Shapley value carry the rung's
/// Δ in a ladder column, flagged `!` where it and the estimate disagree
/// (+10 points against +4), lookahead's a `-`, and a line under each
/// response names the rung and says what `!` means; at 80 columns too.
#[test]
fn the_effects_tab_shows_a_ladders_credit_beside_the_effects() {
    let root = tempfile::tempdir().unwrap();
    let dirs = crate::report::effects::tests::factorial_and_ladder(root.path());
    let mut backend = super::backend::BrowseBackend::open(dirs.to_vec()).unwrap();
    let mut s = AppState::new(true);
    s.browse_only = true;
    super::refresh(&mut s, &mut backend);
    assert_eq!(s.effects.len(), 1);
    s.effects[0].folder = "results/m/20261126-120000".into();
    on_key(&mut s, key(KeyCode::Char('7')));
    let rows = s.effect_rows();
    let acc_tta = |r: &EffectRow| matches!(r, EffectRow::Term { of, x } if of.response == "accuracy" && x.term == "tta");
    let (first, last) = (
        rows.iter().position(acc_tta).unwrap(),
        rows.iter().rposition(acc_tta).unwrap(),
    );
    assert!(last > first, "the Shapley value after the effect");
    // One legend row, under accuracy: the helper's ladder runs record the
    // dawn clock while the design's time is on its recipe's airbench clock,
    // and seconds on another clock are not credited (`add_ladder_credit`).
    let legends = rows
        .iter()
        .filter(|r| matches!(r, EffectRow::Ladder(a) if a.response == "accuracy"))
        .count();
    assert_eq!(legends, 1);
    assert!(
        !rows
            .iter()
            .any(|r| matches!(r, EffectRow::Ladder(a) if a.response == "time"))
    );
    // Accuracy's lookahead main effect (after tta's), selected so that
    // both are in sight at 80×24.
    s.effects_selected = first + 1;
    for (w, h) in [(80, 24), (160, 45)] {
        let text = screen(&s, w, h);
        snapshot(&format!("tui_effects_ladder_{w}x{h}"), &text);
        let lines: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("accuracy (points"))
            .collect();
        let tta = lines
            .iter()
            .find(|l| l.contains("│  tta "))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            tta.contains("+10.00 [") && tta.contains("] !"),
            "{w}x{h}: {tta}"
        );
        let la = lines
            .iter()
            .find(|l| l.contains("│  lookahead "))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(!la.contains('!') && la.contains(" - "), "{w}x{h}: {la}");
        assert!(text.contains("ladder Δ"), "{text}");
    }
    // Too narrow for the ladder's interval: its estimate and the flag stay.
    let narrow = screen(&s, 60, 24);
    let tta = narrow
        .lines()
        .skip_while(|l| !l.contains("accuracy (points"))
        .find(|l| l.contains("│  tta "))
        .unwrap_or_else(|| panic!("{narrow}"));
    assert!(
        tta.contains("+10.00 !") && !tta.contains("+10.00 ["),
        "{tta}"
    );
    let large = screen(&s, 160, 45);
    assert!(
        large.contains(
            "ladder rung that adds the factor alone, against the rung before (lad: + tta)"
        ) && large.contains("! order-dependent"),
        "{large}"
    );
}

/// The bars: zero in the middle column, to half a cell either side.
#[test]
fn effect_bars_diverge_from_zero_to_half_a_cell() {
    use super::view::bar;
    assert_eq!(bar(1.0, 1.0, 7), "   │███");
    assert_eq!(bar(-0.5, 1.0, 7), " ▐█│   ");
    assert_eq!(bar(0.5, 1.0, 7), "   │█▌ ");
    assert_eq!(bar(0.0, 0.0, 7), "   │   ");
    assert_eq!(bar(-2.0, 1.0, 5), "██│  ");
}

/// Over a quarter of the runs noisy: the Results, Ladder and Effects
/// screens say so above their numbers, at 80×24 and 160×45, and the ratios
/// and Δ read from them carry the `!` of the n column.
#[test]
fn noisy_runs_put_a_banner_over_results_ladder_and_effects() {
    let mut s = super::sample::sample_state(true);
    for r in &mut s.results {
        r.noisy = r.n;
    }
    for (w, h) in [(80, 24), (160, 45)] {
        s.tab = Tab::Results;
        let text = screen(&s, w, h);
        snapshot(&format!("tui_results_noisy_{w}x{h}"), &text);
        assert!(
            text.contains("runs are noisy") && text.contains("--drop-noisy"),
            "{text}"
        );
        s.tab = Tab::Ladder;
        let text = screen(&s, w, h);
        assert!(
            text.contains("runs are noisy") && text.contains("idle machine"),
            "{text}"
        );
        s.tab = Tab::Live;
        assert!(!screen(&s, w, h).contains("runs are noisy"));
    }
    s.tab = Tab::Results;
    assert!(screen(&s, 160, 45).contains("×1.25!"));
    for r in &mut s.results {
        r.noisy = 0;
    }
    let quiet = screen(&s, 160, 45);
    assert!(
        !quiet.contains("runs are noisy") && !quiet.contains("×1.25!"),
        "{quiet}"
    );

    let root = tempfile::tempdir().unwrap();
    let mut d = Designed::new(root.path(), FACTORIAL);
    d.feed(0, 0..8);
    let mut backend = super::backend::BrowseBackend::open(vec![d.dir()]).unwrap();
    let mut s = AppState::new(true);
    s.browse_only = true;
    super::refresh(&mut s, &mut backend);
    s.tab = Tab::Effects;
    assert!(!screen(&s, 80, 24).contains("runs are noisy"));
    s.effects[0].noisy = 3;
    let text = screen(&s, 160, 45);
    assert!(
        text.contains("! 3 of 8 runs are noisy") && text.contains("8 runs (3 noisy)"),
        "{text}"
    );
}

/// Two matrices on the Ladder screen: each one's bars are drawn to its own
/// scale, and its head says so and to what.
#[test]
fn the_ladder_says_each_matrix_has_its_own_scale() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Ladder;
    assert!(!screen(&s, 160, 45).contains("own scale"));
    let mut other: Vec<_> = s.results.clone();
    for r in &mut other {
        r.matrix = "airbench".into();
        r.time_mean /= 10.0;
    }
    s.results.extend(other);
    for (w, h) in [(80, 24), (160, 45)] {
        let text = screen(&s, w, h);
        assert!(
            text.contains("▸ demo (bars to its own scale: full bar 30.0 s)")
                && text.contains("▸ airbench (bars to its own scale: full bar 3.0 s)"),
            "{text}"
        );
    }
}

/// Every shipped matrix in the picker at 80×24: what the selected one would
/// queue stays on screen however long the list, the list scrolls to keep
/// the selection in view, and a half-precision matrix on a CPU says it will
/// be emulated slowly.
#[test]
fn the_picker_keeps_its_run_count_in_view_at_80x24_and_marks_half_precision_on_a_cpu() {
    use super::backend::{Rules, picker_entry};
    let rules = Rules {
        devices: vec!["cpu".into()],
        ..Default::default()
    }
    .tiny(true);
    let files: Vec<_> = crate::matrix::matrix_files(std::path::Path::new("ablations"))
        .into_iter()
        .map(|p| picker_entry(&p, &rules, None, None))
        .collect();
    assert!(files.len() > 15, "{}", files.len());
    let smoke = files
        .iter()
        .position(|f| f.path.ends_with("gpu-smoke.toml"))
        .unwrap();
    assert!(
        files[smoke]
            .about
            .contains("in half precision, which a CPU emulates slowly"),
        "{}",
        files[smoke].about
    );
    let demo = files
        .iter()
        .position(|f| f.path.ends_with("demo-ladder.toml"))
        .unwrap();
    assert!(!files[demo].about.contains("half precision"));
    // The last file the tiny form takes (a script matrix's size is its
    // own: refused under `t`, its reason in place of the count).
    let last = files.iter().rposition(|f| !f.refused).unwrap();
    assert!(last > smoke, "{last}");
    let mut s = super::sample::sample_state(true);
    for selected in [0, smoke, last] {
        s.overlay = Overlay::Picker {
            files: files.clone(),
            selected,
        };
        let text = screen(&s, 80, 24);
        let name = files[selected].path.rsplit('/').next().unwrap();
        assert!(text.contains(name), "{selected}: {text}");
        assert!(text.contains(" runs of "), "{selected}: {text}");
    }
    snapshot("tui_picker_80x24", &screen(&s, 80, 24));
    // Nothing named: the picker opens on the demo ladder.
    let Overlay::Picker { selected, .. } = super::picker_on(
        files.clone(),
        std::path::Path::new("ablations/demo-ladder.toml"),
    ) else {
        panic!("not the picker")
    };
    assert_eq!(selected, demo);
}

/// The picker's `?` opens the keys over it, and closing them shows the
/// picker again; a finished folder's Results sort with `s` as a live
/// session's do (issue 64: `?` closed the picker, `s` did nothing).
#[test]
fn the_pickers_help_returns_to_it_and_a_browsed_folder_sorts() {
    let mut s = AppState::new(true);
    let picker = Overlay::Picker {
        files: Vec::new(),
        selected: 0,
    };
    s.overlay = picker.clone();
    on_key(&mut s, key(KeyCode::Char('?')));
    assert_eq!(s.overlay, Overlay::Help);
    on_key(&mut s, key(KeyCode::Esc));
    assert_eq!(s.overlay, picker);
    // Help opened from a tab closes to nothing, as before.
    s.overlay = Overlay::None;
    on_key(&mut s, key(KeyCode::Char('?')));
    on_key(&mut s, key(KeyCode::Esc));
    assert_eq!(s.overlay, Overlay::None);
    let mut b = AppState::new(true);
    b.browse_only = true;
    b.tab = Tab::Results;
    let before = b.sort;
    on_key(&mut b, key(KeyCode::Char('s')));
    assert_ne!(b.sort, before);
}

/// Two runs: the interval itself, bounded as the report bounds it
/// (docs/reports.md), never `± 381.00` points of accuracy.
#[test]
fn two_runs_show_their_interval_bounded_not_a_plus_minus_wider_than_the_scale() {
    let mut s = super::sample::sample_state(true);
    s.tab = Tab::Results;
    for r in &mut s.results {
        r.n = 2;
        r.acc_ci95 = 3.81;
        r.time_ci95 = 50.0;
    }
    let text = screen(&s, 160, 30);
    assert!(
        !text.contains("± 381") && !text.contains("± 50.0"),
        "{text}"
    );
    let row = text.lines().find(|l| l.contains("+ celu")).expect(&text);
    assert!(
        row.contains("[0.00, 100.00]") && row.contains("[0.0, "),
        "{row}"
    );
}
