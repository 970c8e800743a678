//! `tricklab data ...` subcommands.

use super::*;
use clap::Subcommand;

#[derive(clap::Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    pub command: DataCommand,
}

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Download a data set (only `cifar10`: the official binary archive).
    Fetch {
        /// Data set to download.
        name: String,
        /// Destination folder (default: the data folder).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Download from this URL instead of the official host (a mirror).
        #[arg(long)]
        url: Option<String>,
    },
    /// Decode an image tree (folder or .tar.gz with train/<class>/*, test/<class>/*) once into the data folder.
    Import {
        source: PathBuf,
        #[arg(long)]
        name: String,
    },
    /// List the embedded and imported data sets.
    List,
    /// Write a data set (or its per-class subset) as raw bytes for other
    /// programs, in the order tricklab trains on it: meta.json,
    /// {train,test}_images.u8 (N x H x W x C) and {train,test}_labels.u8.
    Export {
        /// A data set spec: embedded, an imported name, a folder or an archive.
        name: String,
        #[arg(long)]
        out: PathBuf,
        /// Keep the first N training images of each class (the `train_per_class` setting).
        #[arg(long)]
        train_per_class: Option<usize>,
        /// Keep the first N test images of each class (`test_per_class`).
        #[arg(long)]
        test_per_class: Option<usize>,
    },
    /// Counts per class, image size, hash and problems found.
    Check {
        /// A data set spec: embedded, an imported name, a folder or an archive.
        #[arg(default_value = "embedded")]
        name: String,
    },
}

#[allow(clippy::too_many_lines, reason = "one arm per data subcommand")]
pub fn cmd_data(args: DataArgs) -> Result<i32> {
    match args.command {
        DataCommand::Fetch { name, dir, url } => {
            if name != "cifar10" {
                bail!(
                    "`{name}` cannot be fetched: only `cifar10` has a download; import image folders with `tricklab data import`"
                );
            }
            let dir = dir.unwrap_or_else(|| data_dir().join("cifar10"));
            let out = fetch_cifar10(&FetchOptions {
                url: url.unwrap_or_else(|| CIFAR10_URL.to_string()),
                dir,
                md5: CIFAR10_MD5.to_string(),
                progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            })?;
            println!("CIFAR-10 ready in {}", out.display());
            println!("use it with --data {}", out.display());
            Ok(0)
        }
        DataCommand::Import { source, name } => {
            let t = std::time::Instant::now();
            let (d, path) = import(&source, &name, &data_dir())?;
            println!(
                "imported {} train + {} test images of {} classes ({}x{}) into {} in {:.1} s",
                d.train.len(),
                d.test.len(),
                d.classes.len(),
                d.width,
                d.height,
                path.display(),
                t.elapsed().as_secs_f64()
            );
            println!("use it with --data {name}");
            Ok(0)
        }
        DataCommand::List => {
            println!(
                "{:<28} {:>7} {:>6} {:>7}  {:<16} source",
                "name", "train", "test", "classes", "hash"
            );
            for i in list()? {
                println!(
                    "{:<28} {:>7} {:>6} {:>7}  {:<16} {}",
                    i.name,
                    i.train,
                    i.test,
                    i.classes,
                    &i.hash[..16.min(i.hash.len())],
                    i.source
                );
            }
            Ok(0)
        }
        DataCommand::Export {
            name,
            out,
            train_per_class,
            test_per_class,
        } => {
            let full = load(&name)?;
            let d = if train_per_class.is_some() || test_per_class.is_some() {
                full.subset(train_per_class, test_per_class)
            } else {
                full
            };
            // Image trees and the embedded set load interleaved; CIFAR-10's binary keeps its own order.
            let order = if is_embedded(&name) || data_dir().join(&name).join(CACHE_FILE).is_file() {
                IMPORT_ORDER
            } else {
                "as loaded"
            };
            export_raw(&d, &out, order)?;
            println!(
                "exported {} train + {} test images of `{}` (hash {}) to {}",
                d.train.len(),
                d.test.len(),
                d.name,
                &d.hash[..16.min(d.hash.len())],
                out.display()
            );
            Ok(0)
        }
        DataCommand::Check { name } => {
            let d = load(&name)?;
            println!(
                "{}: {}x{}x{} images, hash {}",
                d.name, d.channels, d.height, d.width, d.hash
            );
            let (tr, te) = (d.class_counts(&d.train), d.class_counts(&d.test));
            println!("{:<16} {:>7} {:>6}", "class", "train", "test");
            for (i, c) in d.classes.iter().enumerate() {
                println!("{c:<16} {:>7} {:>6}", tr[i], te[i]);
            }
            println!("{:<16} {:>7} {:>6}", "total", d.train.len(), d.test.len());
            let problems = check(&d);
            if problems.is_empty() {
                println!("no problems found");
                return Ok(0);
            }
            for p in &problems {
                println!("problem: {}", p.0);
            }
            eprintln!("error: {} problem(s) found in {name}", problems.len());
            Ok(1)
        }
    }
}
