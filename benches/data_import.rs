//! Import of the JPEG stand-in of CIFAR-10 (60,000 images) and a reload of
//! the cache. The archive path comes from TRICKLAB_STANDIN or ../shared/data.

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let archive = std::env::var_os("TRICKLAB_STANDIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/cifar10-jpeg-q75.tar.gz")
        });
    if !archive.is_file() {
        eprintln!(
            "{}: not found; set TRICKLAB_STANDIN to the stand-in archive",
            archive.display()
        );
        std::process::exit(2);
    }
    let dir = tempfile::tempdir().unwrap();
    println!(
        "## data_import ({} cores)\n",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!("| step | seconds |");
    println!("|---|---|");
    let t = Instant::now();
    let (d, cache) = tricklab::data::import(&archive, "standin", dir.path()).unwrap();
    println!(
        "| import {} + {} images from {} (decode in parallel, write cache) | {:.2} |",
        d.train.len(),
        d.test.len(),
        archive.file_name().unwrap().to_string_lossy(),
        t.elapsed().as_secs_f64()
    );
    let best = (0..3)
        .map(|_| {
            let t = Instant::now();
            let again = tricklab::data::load(cache.to_str().unwrap()).unwrap();
            assert_eq!(again.train.len(), 50_000);
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    println!("| reload the cache (best of 3) | {best:.3} |");
    let t = Instant::now();
    let e = tricklab::data::load("embedded").unwrap();
    println!(
        "| decode the embedded default ({} + {} images) | {:.3} |",
        e.train.len(),
        e.test.len(),
        t.elapsed().as_secs_f64()
    );
}
