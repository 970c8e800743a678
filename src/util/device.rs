//! Devices and the libtorch behind them: names as the user writes them, the
//! labels results record, and the versions the manifest and `doctor` report.

use anyhow::{Result, bail};
use serde::Serialize;
use std::path::{Path, PathBuf};
use tch::Device;

/// A device name's syntax only: `matrix show` of a GPU matrix works on a CPU machine.
pub fn parse_device_name(s: &str) -> Result<Device> {
    Ok(match s {
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda(0),
        other => match other
            .strip_prefix("cuda:")
            .and_then(|i| i.parse::<usize>().ok())
        {
            Some(i) => Device::Cuda(i),
            None => bail!("unknown device `{s}`: use cpu, cuda or cuda:N"),
        },
    })
}

/// The workers' devices from `--devices`: `auto` (the default) is every CUDA
/// device, or the CPU where there is none; `all` every CUDA device; `cpu:N`
/// N CPU workers; `cpu`, `cuda`, `cuda:N` one worker each; `cuda:A-B` the
/// GPUs A to B.
pub fn resolve_devices(specs: &[String]) -> Result<Vec<String>> {
    let count = if tch::Cuda::is_available() {
        tch::Cuda::device_count().max(0) as usize
    } else {
        0
    };
    resolve_devices_with(specs, count)
}

/// [`resolve_devices`] for a machine with `cuda` CUDA devices.
pub fn resolve_devices_with(specs: &[String], cuda: usize) -> Result<Vec<String>> {
    let gpus = || (0..cuda).map(|i| format!("cuda:{i}")).collect::<Vec<_>>();
    let mut out = Vec::new();
    for s in specs {
        match s.as_str() {
            "auto" if cuda > 0 => out.extend(gpus()),
            "auto" => out.push("cpu".into()),
            "all" if cuda > 0 => out.extend(gpus()),
            "all" => bail!(
                "--devices all: this machine has no CUDA device (`tricklab doctor` says why); use auto or cpu"
            ),
            s if s.starts_with("cpu:") => {
                let n: usize = s[4..]
                    .parse()
                    .ok()
                    .filter(|n| (1..=256).contains(n))
                    .ok_or_else(|| {
                        anyhow::anyhow!("--devices {s}: cpu:N takes a worker count from 1 to 256")
                    })?;
                out.extend(std::iter::repeat_n("cpu".to_string(), n));
            }
            // A range, as a gang of GPUs is written: `cuda:0-7`.
            s if s.starts_with("cuda:") && s.contains('-') => {
                let bad = || {
                    anyhow::anyhow!(
                        "--devices {s}: a range is cuda:FIRST-LAST with FIRST ≤ LAST (e.g. cuda:0-7)"
                    )
                };
                let (a, b) = s[5..].split_once('-').ok_or_else(bad)?;
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                for i in a..=b {
                    let d = format!("cuda:{i}");
                    parse_device_name(&d)?;
                    out.push(d);
                }
            }
            s => {
                parse_device_name(s)?;
                out.push(s.to_string());
            }
        }
    }
    if out.is_empty() {
        out.push("cpu".into());
    }
    Ok(out)
}

/// The most `--cpu-threads` takes on a machine of `cores`: 4 × the cores.
/// More threads than cores only make libtorch's pool take turns (the run is
/// slower, its seconds not comparable), which a few times the cores still
/// allows for matching another machine's thread count (oneDNN splits its
/// sums by thread); past 4 × each thread has under a quarter of a core and
/// the run measures the switching, and a value like 100000 asks the kernel
/// for more threads than it gives (the session hung starting them).
pub fn max_cpu_threads(cores: usize) -> usize {
    4 * cores.max(1)
}

/// `--cpu-threads N`, read before anything starts: 0 and more than
/// [`max_cpu_threads`] are refused in one line with the fix.
pub fn parse_cpu_threads(s: &str) -> Result<usize, String> {
    let cores = super::machine::cpu_cores();
    let max = max_cpu_threads(cores);
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("not a number of threads; pass 1 to {max} ({cores} cores here)"))?;
    if n == 0 || n > max {
        return Err(format!(
            "{n} threads on this machine's {cores} cores: pass 1 to {max} (at most 4 threads a core), or leave it out to share the cores among the CPU workers"
        ));
    }
    Ok(n)
}

/// The one-line warning for `--cpu-threads` above the cores, if it is.
pub fn cpu_threads_warning(threads: Option<usize>, cores: usize) -> Option<String> {
    let t = threads.filter(|&t| t > cores)?;
    Some(format!(
        "warn: --cpu-threads {t} on {cores} cores: the threads take turns, so every run is slower and its seconds are not comparable (the runs are flagged noisy); pass --cpu-threads {cores} or fewer for times to compare"
    ))
}

/// N CPU workers share the cores: libtorch's intra-op pool is per process,
/// so each gets cores / N threads (or `threads`) instead of all of them fighting.
pub fn share_cpu_threads(devices: &[String], threads: Option<usize>) {
    let cpu = devices.iter().filter(|d| d.as_str() == "cpu").count();
    let cores = super::machine::cpu_cores();
    match threads {
        // parse_cpu_threads bounds what the command line gives; the clamp
        // keeps a value from elsewhere (a test, the TUI) in the same bounds.
        Some(t) => tch::set_num_threads(t.clamp(1, max_cpu_threads(cores)) as i32),
        None if cpu > 1 => tch::set_num_threads((cores / cpu).max(1) as i32),
        None => {}
    }
}

/// A device this machine has.
pub fn parse_device(s: &str) -> Result<Device> {
    let d = parse_device_name(s)?;
    if let Device::Cuda(i) = d {
        if !tch::Cuda::is_available() {
            bail!(
                "device `{s}` requested but CUDA is not available here (`tricklab doctor` shows why); use cpu instead"
            );
        }
        let n = tch::Cuda::device_count() as usize;
        if i >= n {
            bail!("device `{s}` requested but only {n} CUDA device(s) exist");
        }
    }
    Ok(d)
}

/// What this process's libtorch and devices are.
#[derive(Clone, Debug, Serialize)]
pub struct TorchInfo {
    /// e.g. `2.11.0+cu130`, or `unknown` when no version file sits beside the library.
    pub version: String,
    /// Folder of the libtorch shared libraries actually loaded.
    pub lib_dir: Option<PathBuf>,
    pub cuda_available: bool,
    pub cuda_devices: Vec<String>,
    /// cuDNN version as libtorch reports it (e.g. 91900), when CUDA is available.
    pub cudnn_version: Option<i64>,
    pub cuda_runtime_version: Option<i64>,
    pub threads: i32,
}

pub fn torch_info() -> TorchInfo {
    let lib_dir = loaded_libtorch_dir();
    let version = lib_dir
        .as_deref()
        .and_then(version_near)
        .unwrap_or_else(|| "unknown".into());
    let cuda_available = tch::Cuda::is_available();
    let (cudnn_version, cuda_runtime_version) = if cuda_available {
        (
            tch::Cuda::cudnn_is_available().then(tch::utils::version_cudnn),
            Some(tch::utils::version_cudart()),
        )
    } else {
        (None, None)
    };
    let count = if cuda_available {
        tch::Cuda::device_count()
    } else {
        0
    };
    let names = gpu_names();
    let cuda_devices = (0..count as usize)
        .map(|i| {
            let name = names
                .get(i)
                .cloned()
                .unwrap_or_else(|| "CUDA device".into());
            format!("cuda:{i} {name}")
        })
        .collect();
    TorchInfo {
        version,
        lib_dir,
        cuda_available,
        cuda_devices,
        cudnn_version,
        cuda_runtime_version,
        threads: tch::utils::get_num_threads(),
    }
}

/// A human name for a device spec (`cpu`, `cuda:0 NVIDIA H100 80GB HBM3`).
pub fn device_label(device: &str) -> String {
    let idx = match device {
        "cuda" => Some(0),
        d => d
            .strip_prefix("cuda:")
            .and_then(|i| i.parse::<usize>().ok()),
    };
    match idx {
        Some(i) => match gpu_names().get(i) {
            Some(n) => format!("cuda:{i} {n}"),
            None => format!("cuda:{i}"),
        },
        None => device.to_string(),
    }
}

/// GPU model names from the NVIDIA driver, in bus order (the CUDA default order).
fn gpu_names() -> Vec<String> {
    let mut infos: Vec<PathBuf> = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .map(|rd| rd.flatten().map(|e| e.path().join("information")).collect())
        .unwrap_or_default();
    infos.sort();
    infos
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Model:").map(|m| m.trim().to_string()))
        })
        .collect()
}

/// The folder holding the libtorch_cpu.so mapped into this process.
fn loaded_libtorch_dir() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libtorch_cpu.so"))
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
}

/// A PyPI wheel keeps `version.py` one level up from `lib/`; a libtorch zip keeps
/// `build-version` there.
fn version_near(lib_dir: &Path) -> Option<String> {
    let root = lib_dir.parent()?;
    if let Ok(s) = std::fs::read_to_string(root.join("version.py")) {
        return s.lines().find_map(|l| {
            let v = l.strip_prefix("__version__")?.split('=').nth(1)?;
            Some(v.trim().trim_matches(['\'', '"']).to_string())
        });
    }
    std::fs::read_to_string(root.join("build-version"))
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_every_gpu_and_falls_back_to_the_cpu() {
        let d = |s: &[&str], n| {
            resolve_devices_with(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>(), n)
        };
        assert_eq!(d(&["auto"], 0).unwrap(), ["cpu"]);
        assert_eq!(d(&["auto"], 2).unwrap(), ["cuda:0", "cuda:1"]);
        assert_eq!(d(&["all"], 3).unwrap(), ["cuda:0", "cuda:1", "cuda:2"]);
        assert!(
            d(&["all"], 0)
                .unwrap_err()
                .to_string()
                .contains("no CUDA device")
        );
        assert_eq!(d(&["cpu:2"], 4).unwrap(), ["cpu", "cpu"]);
        assert_eq!(d(&["cuda:1-3"], 4).unwrap(), ["cuda:1", "cuda:2", "cuda:3"]);
        assert!(d(&["cuda:3-1"], 4).is_err() && d(&["cuda:a-2"], 4).is_err());
        assert_eq!(d(&["cuda:0", "cuda:2"], 4).unwrap(), ["cuda:0", "cuda:2"]);
        assert!(d(&["cpu:0"], 0).is_err() && d(&["tpu"], 0).is_err());
    }
}
