//! Script matrices (`[script]` and `[tricks.NAME]`): every kind expands
//! over declared tricks, each variant's command, environment and patches
//! are decided at parse, and bad input is refused at its place in the file.

use super::{Kind, Matrix, parse_in};
use std::path::{Path, PathBuf};

/// A folder holding `train.py` with two lines the patches find.
fn script_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tricklab-script-parse-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("train.py"),
        "warmup = 0\nema = False\nema_again = False\n",
    )
    .unwrap();
    d
}

const TRICKS: &str = r#"
[script]
command = ["python3", "train.py", "--seed", "{seed}", "--epochs", "{epochs}"]
env = { OMP_NUM_THREADS = "2" }
timeout = "5m"
params = { epochs = 4 }

[tricks.smooth]
args = ["--label-smoothing", "{alpha}"]
params = { alpha = 0.2 }

[tricks.tf32]
env = { NVIDIA_TF32_OVERRIDE = "1" }

[tricks.warmup]
patch = [{ file = "train.py", find = "warmup = 0", replace = "warmup = {steps}" }]
params = { steps = 500 }
"#;

fn matrix(head: &str, dir: &Path) -> Matrix {
    parse_in(&format!("{head}\n{TRICKS}"), "m.toml", dir).unwrap()
}

fn err(text: &str, dir: &Path) -> String {
    format!("{:#}", parse_in(text, "m.toml", dir).unwrap_err())
}

/// Variant `i`'s argv, environment and patched files, as recorded.
fn run_of(m: &Matrix, i: usize) -> crate::record::ScriptRecord {
    m.variant_record(i).script().unwrap().clone()
}

#[test]
fn every_kind_expands_over_declared_tricks() {
    let d = script_dir("kinds");
    let ladder = matrix(
        "name='l'\nkind='ladder'\n[[rung]]\nname='base'\n[[rung]]\nname='s'\non=['smooth']\n[[rung]]\nname='w'\non=['warmup']\n",
        &d,
    );
    assert_eq!(ladder.variants.len(), 3);
    assert_eq!(
        run_of(&ladder, 0).argv,
        ["python3", "train.py", "--seed", "{seed}", "--epochs", "4"]
    );
    let top = run_of(&ladder, 2);
    assert_eq!(
        top.argv[6..],
        ["--label-smoothing".to_string(), "0.2".into()]
    );
    assert_eq!(top.patches.len(), 1);
    assert_eq!(top.patches[0].replace, "warmup = 500");
    assert_eq!(top.env["OMP_NUM_THREADS"], "2");
    assert_eq!(top.timeout_s, Some(300.0));
    assert_eq!(ladder.variant_record(2).tricks, ["smooth", "warmup"]);
    assert_eq!(ladder.variant_record(1).reference.unwrap().index, 0);

    let loo = matrix(
        "name='o'\nkind='leave-one-out'\nvary=['smooth','tf32','warmup']\n",
        &d,
    );
    assert_eq!(loo.variants.len(), 4);
    assert_eq!(run_of(&loo, 2).env.get("NVIDIA_TF32_OVERRIDE"), None);
    assert_eq!(run_of(&loo, 1).env["NVIDIA_TF32_OVERRIDE"], "1");
    let add = matrix("name='a'\nkind='add-one'\nvary=['tf32']\n", &d);
    assert_eq!(add.variants.len(), 2);
    let grid = matrix(
        "name='g'\nkind='grid'\n[grid]\nsmooth=['on','off']\n'smooth.alpha'=[0.1,0.3]\n",
        &d,
    );
    assert_eq!(grid.variants.len(), 4);
    let args: Vec<Vec<String>> = (0..4)
        .map(|i| run_of(&grid, i).argv[6..].to_vec())
        .collect();
    assert!(args.contains(&vec!["--label-smoothing".into(), "0.3".into()]));
    assert!(args.contains(&vec![]));
    let list = matrix(
        "name='x'\nkind='list'\nset={epochs=8}\n[[variant]]\nname='a'\n[[variant]]\nname='b'\non=['tf32']\n",
        &d,
    );
    assert_eq!(run_of(&list, 0).argv[5], "8");
    for (kind, extra, n) in [
        ("factorial", "", 8),
        ("fractional", "generators=['C=AB']\n", 4),
        ("shapley", "orders=3\n", 0),
    ] {
        let m = matrix(
            &format!("name='d'\nkind='{kind}'\nvary=['smooth','tf32','warmup']\n{extra}"),
            &d,
        );
        let design = m.design.as_ref().unwrap();
        assert_eq!(design.factors, ["smooth", "tf32", "warmup"]);
        if n > 0 {
            assert_eq!(m.variants.len(), n, "{kind}");
        }
        // Each configuration runs exactly its tricks.
        for (i, w) in design.configs.iter().enumerate() {
            let r = run_of(&m, i);
            assert_eq!(r.argv.len() > 6, w & 1 == 1, "{kind} {i}");
            assert_eq!(r.env.contains_key("NVIDIA_TF32_OVERRIDE"), w >> 1 & 1 == 1);
            assert_eq!(r.patches.len() == 1, w >> 2 & 1 == 1);
        }
    }
    let factorial = matrix(
        "name='f'\nkind='factorial'\nvary=['smooth','tf32']\nrepeats=3\n",
        &d,
    );
    assert_eq!(factorial.kind, Kind::Factorial);
    assert_eq!(factorial.runs().len(), 12);
}

#[test]
fn the_seed_rules_work_over_script_variants() {
    let d = script_dir("seeds");
    // Seeds added by the rules that decide when to stop.
    let until = matrix(
        "name='u'\nkind='add-one'\nvary=['tf32']\nuntil_decided={time=0.05, max=6}\n",
        &d,
    );
    assert_eq!(until.record().asked().len(), 1);
    let adaptive = matrix(
        "name='v'\nkind='add-one'\nvary=['tf32']\nadaptive={ci_width=0.01, max=5}\n",
        &d,
    );
    assert_eq!(adaptive.adaptive.unwrap().max, 5);
}

#[test]
fn the_record_keeps_the_folder_and_the_sources_as_read() {
    let d = script_dir("record");
    let m = matrix("name='r'\nkind='add-one'\nvary=['warmup']\n", &d);
    let r = run_of(&m, 1);
    assert_eq!(r.dir, std::path::absolute(&d).unwrap());
    // The script the command names and the file a patch touches, hashed.
    assert_eq!(r.provenance.files.len(), 1);
    assert_eq!(r.provenance.files["train.py"].len(), 64);
    // The recorded text names the folder absolutely: read from anywhere, as
    // a resume reads its manifest, it decides the same.
    assert!(m.text.contains(&d.display().to_string()));
    let again = parse_in(&m.text, "manifest.json", Path::new("/")).unwrap();
    assert_eq!(again.record(), m.record());
    assert_eq!(m.record().variants[1].script().unwrap().argv, r.argv);
    assert_eq!(m.world_size(1), 1);
    assert_eq!(m.recipe, super::SCRIPT);
}

#[test]
fn patches_apply_in_order_and_a_count_must_match() {
    let d = script_dir("patches");
    let text = |find: &str, count: &str| {
        format!(
            "name='p'\nkind='add-one'\nvary=['ema']\n[script]\ncommand=['python3','train.py']\n[tricks.ema]\npatch=[{{file='train.py', find='{find}', replace='ema = True'{count}}}, {{file='train.py', find='ema = True', replace='ema = 1'}}]\n"
        )
    };
    let m = parse_in(&text("ema = False", ""), "m.toml", &d).unwrap();
    assert_eq!(run_of(&m, 1).patches.len(), 2);
    // "ema = False" is in two lines ("ema_again = False" does not match).
    let e = err(&text("= False", ""), &d);
    assert!(e.starts_with("m.toml:7:"), "{e}");
    assert!(
        e.contains("found 2 time(s)") && e.contains("count = 2"),
        "{e}"
    );
    // Both replaced, the second patch then finds its text twice.
    let e = err(&text("= False", ", count=2"), &d);
    assert!(e.contains("`ema = True` is found 2 time(s)"), "{e}");
    let e = err(&text("no such line", ""), &d);
    assert!(e.contains("found 0 time(s)"), "{e}");
    // The user's file is read, never written.
    assert_eq!(
        std::fs::read_to_string(d.join("train.py")).unwrap(),
        "warmup = 0\nema = False\nema_again = False\n"
    );
}

#[test]
fn bad_script_matrices_name_the_place_and_the_fix() {
    let d = script_dir("bad");
    let head = "name='b'\nkind='add-one'\nvary=['smooth']\n";
    let cases: Vec<(String, &str)> = vec![
        (
            format!("name='b'\nkind='add-one'\nvary=['smoth']\n{TRICKS}"),
            "m.toml:3:7: unknown trick `smoth` (did you mean `smooth`?)",
        ),
        (
            format!("{head}\n[script]\ncommand=['python3','{{sed}}']\n[tricks.smooth]\nargs=['x']\n"),
            "m.toml:6:20: unknown placeholder `{sed}`",
        ),
        (
            format!("{head}recipe='tiny-page-resnet9'\n{TRICKS}"),
            "not both",
        ),
        (format!("{head}\n"), "no `recipe` and no [script] table"),
        (
            format!("{head}data='embedded'\n{TRICKS}"),
            "`data` is the engine's",
        ),
        (
            format!("{head}set={{'smooth.beta'=1}}\n{TRICKS}"),
            "trick `smooth` has no parameter `beta`",
        ),
        (
            format!("{head}set={{lr=1}}\n{TRICKS}"),
            "`lr` is not a parameter of [script] (epochs)",
        ),
        (
            "name='b'\nrecipe='tiny-page-resnet9'\nkind='add-one'\nvary=['celu']\n[tricks.x]\nargs=['y']\n".into(),
            "[tricks.NAME] tables declare a script's tricks",
        ),
        (
            format!("{head}\n[script]\ncommand=['python3']\nparse=[{{regex='(?P<nope>x)'}}]\n[tricks.smooth]\nargs=['x']\n"),
            "parse regex captures `nope`",
        ),
        (
            format!("{head}\n[script]\ncommand=['python3']\ndir='nowhere'\n[tricks.smooth]\nargs=['x']\n"),
            "is not there; `dir` is relative to the matrix file",
        ),
        (
            format!("{head}\n[script]\ncommand=['python3']\n[tricks.smooth]\nhelp='x'\n"),
            "trick `smooth` changes nothing",
        ),
        (
            format!("{head}\n[script]\ncommand=['python3']\nenv={{TRICKLAB_EVENTS='x'}}\n[tricks.smooth]\nargs=['x']\n"),
            "set by tricklab for each run",
        ),
    ];
    for (text, want) in cases {
        let e = err(&text, &d);
        assert!(e.contains(want), "want `{want}` in: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
    // The engine-only forms of a matrix say so.
    let m = matrix(head, &d);
    assert!(format!("{:#}", m.clone().tiny().unwrap_err()).contains("--tiny is the engine's"));
    assert!(
        format!("{:#}", m.with_data("embedded").unwrap_err()).contains("--data is the engine's")
    );
}

#[test]
fn placeholders_fill_and_braces_stay_braces() {
    use crate::script::declare::{fill, placeholders};
    assert_eq!(placeholders("a{x}b{{c}}{y.z}").unwrap(), ["x", "y.z"]);
    assert!(placeholders("{open").is_err());
    assert!(placeholders("close}").is_err());
    let v = |n: &str| (n == "x").then(|| "1".to_string());
    assert_eq!(fill("{x}-{seed}-{{lit}}", &v), "1-{seed}-{{lit}}");
}

#[test]
fn a_published_script_is_checked_against_its_pin() {
    use sha2::Digest;
    let d = script_dir("pinned");
    let sha = hex::encode(sha2::Sha256::digest(
        std::fs::read(d.join("train.py")).unwrap(),
    ));
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let text = |dir: &str, pin: &str| {
        format!(
            "name='p'\nkind='add-one'\nvary=['warm']\n[script]\ncommand=['python3','train.py']\ndir='{dir}'\nsource={{ repo='owner/record', commit='{commit}', files={{ 'train.py'='{pin}' }} }}\n[tricks.warm]\npatch=[{{file='train.py', find='warmup = 0', replace='warmup = 5'}}]\n"
        )
    };
    // The copy as pinned: read, and the pin recorded with the file's hash.
    let m = parse_in(&text(".", &sha), "m.toml", &d).unwrap();
    let p = &run_of(&m, 0).provenance;
    assert_eq!(p.files["train.py"], sha);
    let pin = p.source.as_ref().unwrap();
    assert_eq!(
        (pin.repo.as_str(), pin.commit.as_str()),
        ("owner/record", commit)
    );
    // No copy: the one command that gets it.
    let e = err(&text("peers/record", &sha), &d);
    assert!(
        e.contains("the published script (owner/record at 0123456789abcdef") && e.contains(&format!(
            "fetch it: git clone https://github.com/owner/record {} && git -C {} checkout {commit}",
            d.join("peers/record").display(),
            d.join("peers/record").display()
        )),
        "{e}"
    );
    // A copy that differs: both hashes, and how to get the pinned one.
    let other = "ab".repeat(32);
    let e = err(&text(".", &other), &d);
    assert!(
        e.contains(&format!("sha256 {sha}, the matrix pins {other}")) && e.contains("checkout"),
        "{e}"
    );
    assert!(e.starts_with("m.toml:7:"), "{e}");
    // A pin that is not one.
    let e = err(&text(".", "short"), &d);
    assert!(e.contains("needs its sha256 (64 hex digits"), "{e}");
}

#[test]
fn a_published_trick_is_on_until_a_variant_takes_it_back_with_its_off_change() {
    let d = script_dir("published");
    let text = |extra: &str| {
        format!(
            "name='p'\nkind='leave-one-out'\nvary=['ema', 'compile']\n[script]\ncommand=['python3','-m','tricklab.peers','x','--data','{{data}}','--seed','{{seed}}']\ndata={{ name='embedded', train_per_class=40, test_per_class=10 }}\n\
             [tricks.ema]\nhelp='the EMA the script has, taken back'\n[tricks.ema.off]\npatch=[{{file='train.py', find='ema = False', replace='ema = None'}}]\n\
             [tricks.compile]\nargs=['--compile','auto','--compile-form','{{form}}']\nparams={{ form='published' }}\n[tricks.compile.off]\nargs=['--compile','off']\n{extra}"
        )
    };
    let m = parse_in(&text(""), "m.toml", &d).unwrap();
    let names: Vec<&str> = m.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["all", "- ema", "- compile"]);
    // As written, both are on: no patch, the compile trick's own args.
    let all = run_of(&m, 0);
    assert!(all.patches.is_empty());
    assert_eq!(
        &all.argv[7..],
        ["{seed}", "--compile", "auto", "--compile-form", "published"]
    );
    // Taken back: the off patch, and the off args.
    let ema = run_of(&m, 1);
    assert_eq!(ema.patches.len(), 1);
    assert_eq!(ema.patches[0].replace, "ema = None");
    assert_eq!(ema.patches[0].trick, "ema");
    assert_eq!(&run_of(&m, 2).argv[7..], ["{seed}", "--compile", "off"]);
    // The record says which were on, and the data asked for.
    assert_eq!(m.variant_record(1).tricks, ["compile"]);
    let data = all.data.as_ref().unwrap();
    assert_eq!(
        (
            data.name.as_str(),
            data.train_per_class,
            data.test_per_class
        ),
        ("embedded", Some(40), Some(10))
    );
    // A form set by a variant reaches the argv.
    let m = parse_in(
        &text("").replace(
            "kind='leave-one-out'\nvary=['ema', 'compile']",
            "kind='list'\n[[variant]]\nname='graphs'\nset={ 'compile.form'='graphs' }",
        ),
        "m.toml",
        &d,
    )
    .unwrap();
    assert_eq!(run_of(&m, 0).argv.last().unwrap(), "graphs");
    // `{data}` needs [script.data]; an empty `off` is refused.
    let e = err(
        &text("").replace(
            "data={ name='embedded', train_per_class=40, test_per_class=10 }\n",
            "",
        ),
        &d,
    );
    assert!(
        e.contains("unknown placeholder `{data}`") && e.contains("[script.data]"),
        "{e}"
    );
    let e = err(&text("[tricks.none]\n[tricks.none.off]\n"), &d);
    assert!(e.contains("trick `none`'s `off` changes nothing"), "{e}");
    let e = err(
        &text("").replace("train_per_class=40", "train_per_class=0"),
        &d,
    );
    assert!(e.contains("a per-class count of 0"), "{e}");
}

#[test]
fn run_set_reaches_every_variant_and_is_recorded() {
    let d = script_dir("sets");
    let m = matrix("name='s'\nkind='add-one'\nvary=['smooth']", &d);
    let sets = [("epochs".to_string(), "9".to_string())];
    let m = m.with_sets(&sets).unwrap();
    assert!(m.text.contains("--set epochs=9"), "{}", m.text);
    for i in 0..m.variants.len() {
        assert_eq!(run_of(&m, i).argv[5], "9");
    }
    // The engine's: a recipe setting on every variant, a variant's own kept.
    let e = super::parse(
        "name='e'\nrecipe='tiny-airbench94'\nkind='list'\n[[variant]]\nname='a'\n[[variant]]\nname='b'\nset={ epochs = 5 }\n",
        "e.toml",
    )
    .unwrap()
    .with_sets(&[("epochs".into(), "2".into()), ("label_smoothing.alpha".into(), "0.1".into())])
    .unwrap();
    assert_eq!((e.plans[0].1.epochs, e.plans[1].1.epochs), (2.0, 5.0));
    assert!(e.text.contains("alpha"), "{}", e.text);
    // A key nothing knows is refused by the matrix's own check.
    let err = format!(
        "{:#}",
        matrix("name='s'\nkind='add-one'\nvary=['smooth']", &d)
            .with_sets(&[("nope".into(), "1".into())])
            .unwrap_err()
    );
    assert!(
        err.contains("--set nope=1") && err.contains("`nope`"),
        "{err}"
    );
}

#[test]
fn run_force_wins_over_every_variants_own_change_and_is_recorded() {
    let loo = "name='e'\nrecipe='tiny-airbench94'\nkind='leave-one-out'\nvary=['label_smoothing','lookahead']\n";
    let e = super::parse(loo, "e.toml").unwrap();
    // Without it, `all` turns label smoothing on and `- label_smoothing` off.
    assert_ne!(e.plans[0].1, e.plans[1].1);
    let e = e
        .with_forced(&[("label_smoothing".into(), "off".into())])
        .unwrap();
    assert!(e.text.contains("--force label_smoothing=off"), "{}", e.text);
    let forced = crate::config::Override::Trick {
        key: "label_smoothing".into(),
        on: false,
    };
    for v in &e.variants {
        assert_eq!(v.overrides.last(), Some(&forced), "{}", v.name);
    }
    // `all` now trains as `- label_smoothing`, and the matrix says so.
    assert_eq!(e.plans[0].1, e.plans[1].1);
    assert!(
        e.warnings.iter().any(|w| w.contains("- label_smoothing")),
        "{:?}",
        e.warnings
    );
    // A setting is checked against the recipe; a trick takes on/off only.
    let err = |k: &str, v: &str| {
        format!(
            "{:#}",
            super::parse(loo, "e.toml")
                .unwrap()
                .with_forced(&[(k.into(), v.into())])
                .unwrap_err()
        )
    };
    assert!(err("nope", "1").contains("`nope`"), "{}", err("nope", "1"));
    let e = err("lookahead", "3");
    assert!(
        e.contains("force `lookahead` is a trick") && e.contains("--force lookahead=3"),
        "{e}"
    );
    // A script's trick alike.
    let d = script_dir("force");
    let m = matrix("name='s'\nkind='add-one'\nvary=['smooth']", &d)
        .with_forced(&[("smooth".into(), "off".into())])
        .unwrap();
    assert_eq!(run_of(&m, 0), run_of(&m, 1));
}
