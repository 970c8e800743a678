//! `tricklab doctor`: what this machine's libtorch, devices and folders are,
//! and what is wrong with them.

use crate::util::device::torch_info;
use anyhow::Result;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Results folder to check for write access.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn cmd_doctor(args: DoctorArgs) -> Result<i32> {
    let info = torch_info();
    let mut problems = Vec::new();
    if info.version == "unknown" {
        problems.push(
            "libtorch version unknown: no version.py or build-version beside the loaded library"
                .to_string(),
        );
    } else if !info.version.starts_with("2.11.") {
        problems.push(format!(
            "libtorch {} is loaded but tch 0.24 needs 2.11.0: rebuild with `make build` (it installs torch==2.11.0 into .venv)",
            info.version
        ));
    }
    let writable = check_writable(&args.results);
    if let Err(e) = &writable {
        problems.push(format!("{e:#}"));
    }
    let data = crate::data::data_dir();
    if args.json {
        let v = serde_json::json!({
            "tricklab": env!("CARGO_PKG_VERSION"),
            "torch": info,
            "data_dir": data,
            "results": args.results,
            "results_writable": writable.is_ok(),
            "run_devices": crate::util::device::resolve_devices(&["auto".to_string()]).ok(),
            "collectives": crate::dist::group::available(),
            "problems": problems,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("tricklab        {}", env!("CARGO_PKG_VERSION"));
        println!("libtorch        {}", info.version);
        if let Some(d) = &info.lib_dir {
            println!("libtorch dir    {}", d.display());
        }
        println!("threads         {}", info.threads);
        println!(
            "CUDA available  {}",
            if info.cuda_available {
                "yes"
            } else {
                "no (CPU runs only)"
            }
        );
        for d in &info.cuda_devices {
            println!("device          {d}");
        }
        if let Some(v) = info.cudnn_version {
            println!("cuDNN           {v}");
        }
        if let Ok(d) = crate::util::device::resolve_devices(&["auto".to_string()]) {
            println!("runs would use  {} (--devices auto)", d.join(", "));
        }
        println!("collectives     {}", collectives_line());
        println!("data folder     {}", data.display());
        println!(
            "results folder  {} ({})",
            args.results.display(),
            if writable.is_ok() {
                "writable"
            } else {
                "NOT writable"
            }
        );
    }
    if let Some(first) = problems.first() {
        eprintln!("error: {first}");
        return Ok(1);
    }
    Ok(0)
}

fn check_writable(dir: &Path) -> Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create results folder {}: pick another with --results",
            dir.display()
        )
    })?;
    let probe = dir.join(format!(".doctor-probe-{}", std::process::id()));
    std::fs::write(&probe, b"ok").with_context(|| {
        format!(
            "results folder {} is not writable: fix its permissions or pick another",
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// Which c10d process groups this binary was built with, for runs of
/// world_size > 1, and what to do where one is missing.
fn collectives_line() -> String {
    let have = crate::dist::group::available();
    let gloo = have.contains("gloo");
    let nccl = have.contains("nccl");
    match (gloo, nccl) {
        (true, true) => "Gloo (CPU) and NCCL (GPU)".into(),
        (true, false) => {
            "Gloo (CPU) only: no NCCL (the build found no CUDA runtime headers)".into()
        }
        (false, true) => "NCCL (GPU) only: no Gloo (install libgloo-dev and rebuild)".into(),
        (false, false) => {
            "none: world_size > 1 cannot run (install libgloo-dev and rebuild)".into()
        }
    }
}
