//! Mutation fuzzing of what a user hands tricklab: every shipped matrix and a
//! fresh `runs.parquet`, with bytes flipped, lines dropped or duplicated and
//! files cut short. Nothing may panic; a bad matrix gets one line naming its
//! file. `TRICKLAB_FUZZ_ITERS` sets the mutations per input (`make fuzz`
//! runs 20,000); the default keeps `make test` quick.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

fn iters() -> usize {
    std::env::var("TRICKLAB_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// The same mutations on every machine, run to run.
use tricklab::util::splitmix::SplitMix64 as Rng;

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => b.truncate(rng.below(b.len() + 1)),
            2 if !b.is_empty() => {
                let i = rng.below(b.len());
                let set = b"=[]{}\"'#,.\n\\x";
                b.insert(i, set[rng.below(set.len())]);
            }
            3 => {
                let lines: Vec<&[u8]> = b.split(|&c| c == b'\n').collect();
                let drop = rng.below(lines.len());
                b = lines
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != drop)
                    .map(|(_, l)| l.to_vec())
                    .collect::<Vec<_>>()
                    .join(&b'\n');
            }
            4 => {
                let lines: Vec<&[u8]> = b.split(|&c| c == b'\n').collect();
                let dup = rng.below(lines.len());
                let mut v: Vec<Vec<u8>> = lines.iter().map(|l| l.to_vec()).collect();
                v.insert(dup, lines[dup].to_vec());
                b = v.join(&b'\n');
            }
            _ if b.len() > 8 => {
                let (i, j) = (rng.below(b.len()), rng.below(b.len()));
                b.swap(i, j);
            }
            _ => {}
        }
    }
    b
}

#[test]
fn mutated_matrices_give_one_line_errors_and_never_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut rng = Rng(7);
    let mut errors = 0;
    for file in tricklab::matrix::matrix_files(&root.join("ablations")) {
        let text = std::fs::read(&file).unwrap();
        for _ in 0..iters() {
            let m = mutate(&mut rng, &text);
            let Ok(s) = String::from_utf8(m) else {
                continue;
            };
            let r = catch_unwind(|| tricklab::matrix::parse(&s, "fuzzed.toml"));
            let r = r.unwrap_or_else(|_| panic!("the parser panicked on:\n{s}"));
            if let Err(e) = r {
                errors += 1;
                let line = tricklab::util::one_line(&e);
                assert!(line.contains("fuzzed.toml"), "{line}\n--- on:\n{s}");
                assert!(!line.contains('\n'));
            }
        }
    }
    assert!(
        errors > 0,
        "no mutation was ever refused: the fuzzer does nothing"
    );
}

#[test]
fn mutated_results_tables_are_refused_and_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let rows: Vec<tricklab::store::RunRow> = (0..6)
        .map(|i| tricklab::store::RunRow {
            matrix: "m".into(),
            index: i % 3,
            variant: format!("v{}", i % 3),
            repeat: i / 3,
            seed: i as u64,
            tricks: vec!["flip".into()],
            acc: Some(0.5 + 0.01 * i as f64),
            dawn_s: Some(10.0),
            lr: Some(0.4),
            ..Default::default()
        })
        .collect();
    let good = tmp.path().join("runs.parquet");
    tricklab::store::write_runs(&good, &rows).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let bad = tmp.path().join("bad.parquet");
    let mut rng = Rng(11);
    let (mut refused, mut read) = (0, 0);
    for _ in 0..iters() {
        std::fs::write(&bad, mutate(&mut rng, &bytes)).unwrap();
        match catch_unwind(AssertUnwindSafe(|| tricklab::store::read_runs(&bad))) {
            Ok(Ok(_)) => read += 1,
            Ok(Err(e)) => {
                refused += 1;
                let line = tricklab::util::one_line(&e);
                assert!(line.contains("bad.parquet"), "{line}");
            }
            Err(_) => panic!("read_runs panicked on a mutated file"),
        }
    }
    assert!(refused > 0, "{read} read, none refused");
}
