//! The machine a run ran on, and whether something else used it meanwhile:
//! what makes the same seed take 6 s one night and 80 s the next. Read at a
//! run's start and end (files under /proc, one `nvidia-smi` call on a GPU),
//! and on a GPU by a watcher thread once a second in between, for the peak a
//! short throttle leaves between two end points; never in the training
//! thread's hot path.

use serde::{Deserialize, Serialize};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A reading at one moment.
pub struct Probe {
    at: Instant,
    /// CPU time of every process, busy states only, in seconds (/proc/stat).
    all_busy_s: Option<f64>,
    /// This process's CPU time, every thread, in seconds.
    self_s: f64,
    load1: Option<f64>,
    gpu: Option<GpuSample>,
}

/// One `nvidia-smi --query-gpu` reading.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub name: String,
    pub sm_clock_mhz: Option<f64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    /// The active clock-throttle reasons that slow a run (thermal, hardware
    /// slowdown, power brake); idle and application settings left out.
    pub throttle: Vec<String>,
}

/// What a run's row records about its machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    pub cpu_model: String,
    pub cpu_cores: usize,
    pub load_start: Option<f64>,
    pub load_end: Option<f64>,
    /// Of every core's time during the run, the share other processes used.
    pub other_cpu: Option<f64>,
    pub gpu_start: Option<GpuSample>,
    pub gpu_end: Option<GpuSample>,
    /// The extremes the watcher saw between start and end.
    #[serde(default)]
    pub gpu_peak: Option<GpuPeak>,
}

/// The extremes of a GPU's readings over a run: a throttle that came and went
/// between the start and end readings still shows here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuPeak {
    pub samples: u32,
    /// The lowest SM clock: a thermal or power throttle pulls it down.
    pub sm_clock_min_mhz: Option<f64>,
    pub sm_clock_max_mhz: Option<f64>,
    pub temperature_max_c: Option<f64>,
    pub power_max_w: Option<f64>,
    /// Every throttle reason seen at any reading, in first-seen order.
    pub throttle: Vec<String>,
}

impl GpuPeak {
    fn add(&mut self, g: &GpuSample) {
        fn keep(a: &mut Option<f64>, b: Option<f64>, pick: fn(f64, f64) -> f64) {
            if let Some(b) = b.filter(|b| b.is_finite()) {
                *a = Some(a.map_or(b, |a| pick(a, b)));
            }
        }
        self.samples += 1;
        keep(&mut self.sm_clock_min_mhz, g.sm_clock_mhz, f64::min);
        keep(&mut self.sm_clock_max_mhz, g.sm_clock_mhz, f64::max);
        keep(&mut self.temperature_max_c, g.temperature_c, f64::max);
        keep(&mut self.power_max_w, g.power_w, f64::max);
        for t in &g.throttle {
            if !self.throttle.contains(t) {
                self.throttle.push(t.clone());
            }
        }
    }
}

/// A thread that reads the GPU every `every` while a run trains and keeps
/// the extremes. It stops when finished or dropped (a cancelled run).
pub struct GpuWatch {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<GpuPeak>>,
}

/// How often the watcher reads the GPU: each reading starts an `nvidia-smi`
/// process on the host, so once a second rather than per step (its cost on a
/// GPU machine is not measured yet).
pub const GPU_WATCH_EVERY: Duration = Duration::from_secs(1);

impl GpuWatch {
    /// Reads with `sample` at once and then every `every` until finished.
    pub fn start(
        mut sample: impl FnMut() -> Option<GpuSample> + Send + 'static,
        every: Duration,
    ) -> GpuWatch {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gpu-watch".into())
            .spawn(move || {
                let mut peak = GpuPeak::default();
                loop {
                    if let Some(g) = sample() {
                        peak.add(&g);
                    }
                    match stopped.recv_timeout(every) {
                        Err(mpsc::RecvTimeoutError::Timeout) => continue,
                        _ => return peak,
                    }
                }
            })
            .ok();
        GpuWatch {
            stop: Some(stop),
            thread,
        }
    }

    /// Watches CUDA device `index` through `nvidia-smi`.
    pub fn nvidia_smi(index: usize) -> GpuWatch {
        GpuWatch::start(move || gpu_sample(index), GPU_WATCH_EVERY)
    }

    /// Stops the thread; the extremes it saw (`None`: no reading succeeded).
    pub fn finish(mut self) -> Option<GpuPeak> {
        drop(self.stop.take());
        let peak = self.thread.take()?.join().ok()?;
        (peak.samples > 0).then_some(peak)
    }
}

impl Drop for GpuWatch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn all_busy_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = cpu
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    if v.len() < 8 {
        return None;
    }
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    Some(busy as f64 / clock_ticks())
}

fn self_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// This machine's name, as uname(2) gives it (a node's own name also in a
/// container or a namespace that sets one); `unknown` where it has none.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if ok && !name.is_empty() => name.to_string(),
        _ => "unknown".into(),
    }
}

/// A process's state letter (`R`, `S`, `T` stopped, ...) from /proc;
/// `None` where it is gone or unread.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// A `Key:   N kB` line of a /proc file (`/proc/meminfo`'s MemAvailable,
/// `/proc/self/status`'s VmHWM), in bytes; `None` where unread.
pub fn proc_bytes(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

pub fn cpu_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The reasons in `clocks_throttle_reasons.active` that slow a run down.
fn throttle_reasons(mask: u64) -> Vec<String> {
    [
        (0x8, "hw_slowdown"),
        (0x20, "sw_thermal"),
        (0x40, "hw_thermal"),
        (0x80, "hw_power_brake"),
    ]
    .iter()
    .filter(|(bit, _)| mask & bit != 0)
    .map(|(_, n)| n.to_string())
    .collect()
}

/// Parses one line of `nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,
/// power.draw,clocks_throttle_reasons.active --format=csv,noheader,nounits`.
pub fn parse_gpu_line(line: &str) -> Option<GpuSample> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() < 5 || f[0].is_empty() {
        return None;
    }
    let num = |s: &str| s.parse::<f64>().ok();
    let mask = u64::from_str_radix(f[4].trim_start_matches("0x"), 16).unwrap_or(0);
    Some(GpuSample {
        name: f[0].to_string(),
        sm_clock_mhz: num(f[1]),
        temperature_c: num(f[2]),
        power_w: num(f[3]),
        throttle: throttle_reasons(mask),
    })
}

/// GPU `index`'s state, where `nvidia-smi` exists.
pub fn gpu_sample(index: usize) -> Option<GpuSample> {
    let o = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active",
            "--format=csv,noheader,nounits",
            "-i",
            &index.to_string(),
        ])
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    parse_gpu_line(String::from_utf8_lossy(&o.stdout).lines().next()?)
}

impl Probe {
    /// This process's CPU seconds, and the wall seconds, since the reading.
    pub fn since(&self) -> (f64, f64) {
        (self_cpu_s() - self.self_s, self.at.elapsed().as_secs_f64())
    }
}

/// Counts `cpu_s` CPU seconds over `wall_s` as the run's own rather than
/// other processes' (its other ranks on the same machine, which are not a
/// disturbance of the run but the run).
pub fn discount_own(m: &mut MachineState, cpu_s: f64, wall_s: f64) {
    if let Some(o) = m.other_cpu.as_mut()
        && wall_s > 0.0
        && m.cpu_cores > 0
    {
        *o = (*o - cpu_s / (wall_s * m.cpu_cores as f64)).clamp(0.0, 1.0);
    }
}

/// A reading now; `gpu`: the CUDA index the run uses, if any.
pub fn probe(gpu: Option<usize>) -> Probe {
    Probe {
        at: Instant::now(),
        all_busy_s: all_busy_s(),
        self_s: self_cpu_s(),
        load1: load1(),
        gpu: gpu.and_then(gpu_sample),
    }
}

/// The machine over a run, from its start and end readings and what a
/// watcher saw in between.
pub fn between(start: &Probe, end: &Probe, gpu_peak: Option<GpuPeak>) -> MachineState {
    let cores = cpu_cores();
    let wall = end.at.duration_since(start.at).as_secs_f64();
    let other_cpu = match (start.all_busy_s, end.all_busy_s) {
        (Some(a), Some(b)) if wall > 0.0 => {
            let others = (b - a) - (end.self_s - start.self_s);
            Some((others / (wall * cores as f64)).clamp(0.0, 1.0))
        }
        _ => None,
    };
    MachineState {
        cpu_model: cpu_model(),
        cpu_cores: cores,
        load_start: start.load1,
        load_end: end.load1,
        other_cpu,
        gpu_start: start.gpu.clone(),
        gpu_end: end.gpu.clone(),
        gpu_peak,
    }
}

/// Other processes' share of the machine above which a run's seconds are not its own.
pub const BUSY_SHARE: f64 = 0.25;
/// Epoch-to-epoch spread of throughput (coefficient of variation) above which
/// a run was disturbed (a quiet run's epochs differ by a few percent).
pub const MAX_THROUGHPUT_CV: f64 = 0.3;

/// Why a run's seconds should not be trusted, or `None`.
pub fn noise_reason(m: &MachineState, throughput_cv: Option<f64>) -> Option<String> {
    let mut why = Vec::new();
    if let Some(o) = m.other_cpu.filter(|&o| o > BUSY_SHARE) {
        why.push(format!(
            "other processes used {:.0}% of the {} cores",
            100.0 * o,
            m.cpu_cores
        ));
    }
    let throttle = gpu_throttle(m);
    if !throttle.is_empty() {
        why.push(format!("GPU throttled ({})", throttle.join(", ")));
    }
    if let Some(cv) = throughput_cv.filter(|&cv| cv > MAX_THROUGHPUT_CV) {
        why.push(format!(
            "throughput varied {:.0}% between epochs",
            100.0 * cv
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Why a run with `threads` libtorch threads on `cores` cores is noisy:
/// more threads than cores take turns on them, so its seconds measure
/// the turns (`--cpu-threads` above the cores).
pub fn thread_noise(threads: Option<usize>, cores: usize) -> Option<String> {
    let t = threads.filter(|&t| t > cores)?;
    Some(format!("more libtorch threads ({t}) than cores ({cores})"))
}

/// Every throttle reason seen at start, in between or at the end.
pub fn gpu_throttle(m: &MachineState) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    let seen = [&m.gpu_start, &m.gpu_end]
        .into_iter()
        .flatten()
        .map(|g| &g.throttle)
        .chain(m.gpu_peak.iter().map(|p| &p.throttle));
    for t in seen.flatten() {
        if !all.contains(t) {
            all.push(t.clone());
        }
    }
    all
}

/// Coefficient of variation of the epochs' throughput after the first
/// (which carries one-time costs); `None` below 2 such epochs.
pub fn throughput_cv(images_per_s: &[f64]) -> Option<f64> {
    let xs: Vec<f64> = images_per_s
        .iter()
        .skip(1)
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if xs.len() < 2 {
        return None;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some(var.sqrt() / mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lines_and_throttle_bits_parse() {
        let g =
            parse_gpu_line("NVIDIA H100 80GB HBM3, 1980, 41, 312.55, 0x0000000000000004").unwrap();
        assert_eq!(g.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(
            (g.sm_clock_mhz, g.temperature_c),
            (Some(1980.0), Some(41.0))
        );
        // 0x4 is the software power cap, normal at full load: not a throttle here.
        assert!(g.throttle.is_empty());
        let hot = parse_gpu_line("A100, 1100, 88, 250, 0x0000000000000048").unwrap();
        assert_eq!(hot.throttle, ["hw_slowdown", "hw_thermal"]);
        assert_eq!(parse_gpu_line(""), None);
    }

    #[test]
    fn a_busy_machine_a_throttled_gpu_and_a_ragged_run_are_flagged() {
        let quiet = MachineState {
            cpu_cores: 2,
            other_cpu: Some(0.05),
            ..Default::default()
        };
        assert_eq!(noise_reason(&quiet, Some(0.04)), None);
        let busy = MachineState {
            other_cpu: Some(0.6),
            ..quiet.clone()
        };
        assert!(
            noise_reason(&busy, None)
                .unwrap()
                .contains("60% of the 2 cores")
        );
        let throttled = MachineState {
            gpu_end: parse_gpu_line("A100, 900, 90, 250, 0x40"),
            ..quiet.clone()
        };
        assert!(
            noise_reason(&throttled, None)
                .unwrap()
                .contains("hw_thermal")
        );
        // A throttle that came and went between the two end readings.
        let mut peak = GpuPeak::default();
        peak.add(&parse_gpu_line("A100, 1400, 70, 250, 0x0").unwrap());
        peak.add(&parse_gpu_line("A100, 900, 91, 260, 0x20").unwrap());
        let passing = MachineState {
            gpu_start: parse_gpu_line("A100, 1400, 60, 250, 0x0"),
            gpu_end: parse_gpu_line("A100, 1400, 70, 250, 0x0"),
            gpu_peak: Some(peak),
            ..quiet.clone()
        };
        assert!(
            noise_reason(&passing, None)
                .unwrap()
                .contains("GPU throttled (sw_thermal)")
        );
        // 148 ↔ 1737 img/s inside one run.
        let cv = throughput_cv(&[900.0, 1737.0, 148.0, 1700.0]).unwrap();
        assert!(
            noise_reason(&quiet, Some(cv))
                .unwrap()
                .contains("throughput varied")
        );
        assert_eq!(throughput_cv(&[100.0, 200.0]), None);
    }

    #[test]
    fn the_watcher_keeps_each_extreme_and_stops_when_finished_or_dropped() {
        let readings = [
            "H100, 1980, 45, 300, 0x0",
            "H100, 1410, 87, 690, 0x40",
            "H100, 1755, 80, 650, 0x0",
        ];
        let (seen_tx, seen) = mpsc::channel();
        let mut i = 0;
        let watch = GpuWatch::start(
            move || {
                let g = parse_gpu_line(readings[i % readings.len()]);
                i += 1;
                let _ = seen_tx.send(i);
                g
            },
            Duration::from_millis(1),
        );
        // Wait for one round of all three readings, whatever the scheduler does.
        while seen.recv().unwrap() < readings.len() {}
        let p = watch.finish().unwrap();
        assert!(p.samples >= 3, "{p:?}");
        assert_eq!(p.sm_clock_min_mhz, Some(1410.0));
        assert_eq!(p.sm_clock_max_mhz, Some(1980.0));
        assert_eq!(p.temperature_max_c, Some(87.0));
        assert_eq!(p.power_max_w, Some(690.0));
        assert_eq!(p.throttle, ["hw_thermal"]);
        // A watcher with no reading says so, and a dropped one (a cancelled
        // run) does not wait out its interval.
        assert_eq!(
            GpuWatch::start(|| None, Duration::from_millis(1)).finish(),
            None
        );
        let t0 = Instant::now();
        drop(GpuWatch::start(|| None, Duration::from_secs(60)));
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn other_processes_show_up_and_our_own_threads_do_not() {
        let start = probe(None);
        // Our own work: counted as ours, not as another process's.
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed().as_millis() < 300 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let m = between(&start, &probe(None), None);
        assert!(x > 0);
        assert!(m.cpu_cores >= 1 && !m.cpu_model.is_empty());
        // Whatever else this machine runs, our 0.3 s of spinning is not in it.
        assert!(m.other_cpu.is_some_and(|o| o < 0.9), "{m:?}");
    }
}
