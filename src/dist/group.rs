//! One rank's handle on PyTorch's own distributed engine (c10d, through
//! `native::c10d`): the TCPStore rendezvous, then a process group,
//! ProcessGroupNCCL for CUDA tensors and ProcessGroupGloo for CPU tensors.
//! Nothing here moves bytes itself: every collective is c10d's. Where the
//! rank and its peers are comes from `dist::env`.

use crate::config::{BUCKET_BYTES, CommHook, DdpOptions, DdpTimes};
use crate::dist::env::Launch;
use crate::native::c10d::*;
use anyhow::{Context, Result, bail};
use std::ffi::{CStr, CString, c_int, c_void};
use std::time::Duration;
use tch::{Kind, Tensor};

thread_local! {
    /// The group this thread's SyncBN layers reduce over (null: none).
    static INSTALLED: std::cell::Cell<*mut c_void> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// While alive, SyncBN layers on this thread reduce over its group.
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        INSTALLED.set(std::ptr::null_mut());
    }
}

/// Training-mode BatchNorm with its batch statistics (and the sums its input
/// gradient needs) summed over the installed group's ranks: the N ranks
/// normalise as one process over the whole global batch
/// (torch.nn.SyncBatchNorm). `None` where no group is installed (a run of
/// one process, whose batch is already whole). A failed all-reduce (a rank
/// lost) ends the rank with its message.
pub fn sync_batch_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: &Tensor,
    running: (&Tensor, &Tensor),
    momentum: f64,
    eps: f64,
) -> Option<Tensor> {
    let g = INSTALLED.get();
    if g.is_null() {
        return None;
    }
    let w = weight.map_or(std::ptr::null(), Tensor::as_ptr);
    // SAFETY: the group outlives its `Installed` guard; the tensors are live.
    let y = unsafe {
        tricklab_sync_batch_norm(
            g,
            x.as_ptr(),
            w,
            bias.as_ptr(),
            running.0.as_ptr(),
            running.1.as_ptr(),
            momentum,
            eps,
        )
    };
    assert!(!y.is_null(), "SyncBN: {}", last_error());
    // SAFETY: a fresh heap tensor from the shim, now owned by tch.
    Some(unsafe { Tensor::from_ptr(y) })
}

/// The collectives this binary has: `gloo`, `gloo,nccl`, or empty.
pub fn available() -> String {
    // SAFETY: a static C string.
    unsafe { CStr::from_ptr(tricklab_collectives()) }
        .to_string_lossy()
        .into_owned()
}

fn last_error() -> String {
    // SAFETY: a thread-local string the shim keeps alive.
    let e = unsafe { CStr::from_ptr(tricklab_last_error()) }.to_string_lossy();
    // c10d's messages carry a C++ stack after the first line.
    e.lines().next().unwrap_or("").trim().to_string()
}

/// A joined process group: NCCL's for CUDA tensors or Gloo's for CPU
/// tensors. Collectives fail (never hang) after the timeout it was joined with.
pub struct Collective {
    store: *mut c_void,
    group: *mut c_void,
    pub rank: usize,
    pub world: usize,
    /// The host each rank runs on, by rank (rank 0 learns every rank's at
    /// the rendezvous; the others know their own only).
    pub hosts: Vec<String>,
    /// Every rank's host and process id, by rank (all ranks learn them at
    /// the rendezvous): a rank that stops answering is named from them.
    peers: Vec<(String, u32)>,
    /// How long a rendezvous or collective waits before it fails.
    timeout: Duration,
    /// Gathers made so far: each gets its own keys, since the store lives
    /// as long as the gang (a warm-up's keys must not answer the run's).
    gathers: std::cell::Cell<u64>,
}

impl Drop for Collective {
    fn drop(&mut self) {
        // SAFETY: both handles came from the shim and are freed once.
        unsafe {
            tricklab_pg_free(self.group);
            tricklab_store_free(self.store);
        }
    }
}

/// Where the ranks run: `2 ranks on 2 hosts: n1 (rank 0), n2 (rank 1)`,
/// `hosts[r]` rank r's host; consecutive ranks on one host are one range.
pub fn placement(hosts: &[String]) -> String {
    let mut runs: Vec<(&str, usize, usize)> = Vec::new();
    for (r, h) in hosts.iter().enumerate() {
        match runs.last_mut() {
            Some((last, _, end)) if *last == h.as_str() && *end + 1 == r => *end = r,
            _ => runs.push((h.as_str(), r, r)),
        }
    }
    let mut distinct: Vec<&str> = hosts.iter().map(String::as_str).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let ranks = |a: usize, b: usize| match b - a {
        0 => format!("rank {a}"),
        _ => format!("ranks {a}-{b}"),
    };
    let at = runs
        .iter()
        .map(|(h, a, b)| format!("{h} ({})", ranks(*a, *b)))
        .collect::<Vec<_>>()
        .join(", ");
    match distinct.len() {
        1 => format!("{} ranks on 1 host: {at}", hosts.len()),
        n => format!("{} ranks on {n} hosts: {at}", hosts.len()),
    }
}

impl Collective {
    /// Rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 serves the store and
    /// waits for every rank), then compares each rank's `fingerprint` (its
    /// binary, its plan, its data, its options) with rank 0's, then builds
    /// the process group. c10d's own messages meanwhile (its retries and
    /// C++ backtraces) go to a log file, not the terminal: a failed join is
    /// one line, naming the file where they are kept.
    pub fn join(
        l: &Launch,
        nccl: bool,
        fingerprint: &[Part],
        timeout: Duration,
    ) -> Result<Collective> {
        let log = C10dLog::start(l.rank);
        let joined = Collective::join_quietly(l, nccl, fingerprint, timeout);
        match joined {
            Err(e) => match log.and_then(C10dLog::keep) {
                Some(path) => Err(anyhow::anyhow!(
                    "{e:#} (c10d's own messages: {})",
                    path.display()
                )),
                None => Err(e),
            },
            // Dropping the log removes it: a join's retries that succeeded.
            ok => ok,
        }
    }

    fn join_quietly(
        l: &Launch,
        nccl: bool,
        fingerprint: &[Part],
        timeout: Duration,
    ) -> Result<Collective> {
        let who = format!("rank {} of {}", l.rank, l.world);
        let host = CString::new(l.master_addr.clone())?;
        let ms = timeout.as_millis() as i64;
        // Rank 0 serves the store, unless torchrun's agent already does.
        let serves = l.rank == 0 && l.agent_store.is_none();
        let prefix = CString::new(l.agent_store.clone().unwrap_or_default())?;
        // SAFETY: the shim copies the host and prefix strings.
        let store = unsafe {
            tricklab_store_new(
                host.as_ptr(),
                l.master_port.into(),
                serves.into(),
                l.world as c_int,
                ms,
                prefix.as_ptr(),
            )
        };
        if store.is_null() {
            let e = last_error();
            let at = format!("{}:{}", l.master_addr, l.master_port);
            if e.contains("EADDRINUSE") || e.contains("address already in use") {
                bail!(
                    "{who}: port {} on {} is in use (MASTER_PORT): pick a free port",
                    l.master_port,
                    l.master_addr
                );
            }
            if l.rank == 0 && (e.contains("Timed out") || e.contains("timed out")) {
                bail!(
                    "{who}: not every rank arrived at {at} within {} s ({e}): a rank failed to start or cannot reach MASTER_ADDR",
                    timeout.as_secs()
                );
            }
            bail!(
                "{who}: no rendezvous at {at} within {} s ({e}): is rank 0 running, and is MASTER_ADDR reachable from this host?",
                timeout.as_secs()
            );
        }
        let mut c = Collective {
            store,
            group: std::ptr::null_mut(),
            rank: l.rank,
            world: l.world,
            hosts: vec![crate::util::machine::hostname()],
            peers: Vec::new(),
            timeout,
            gathers: std::cell::Cell::new(0),
        };
        c.check_fingerprints(fingerprint)
            .map_err(|e| anyhow::anyhow!("{who}: {e}"))?;
        let iface = CString::new(std::env::var("GLOO_SOCKET_IFNAME").unwrap_or_default())?;
        // SAFETY: the store handle is live; the shim copies the interface name.
        c.group = unsafe {
            tricklab_pg_new(
                c.store,
                nccl.into(),
                l.rank as c_int,
                l.world as c_int,
                ms,
                iface.as_ptr(),
                l.is_loopback().into(),
            )
        };
        if c.group.is_null() {
            let e = last_error();
            // Dropping `c` frees the store (and a null group is no group).
            bail!(
                "{who}: the {} process group did not form: {e}",
                if nccl { "NCCL" } else { "Gloo" }
            );
        }
        Ok(c)
    }

    /// Every rank publishes its fingerprint; rank 0 compares them part by
    /// part and publishes the verdict, so every rank stops with the same
    /// reason, one line naming the rank and what differs.
    fn check_fingerprints(&mut self, mine: &[Part]) -> Result<()> {
        self.put(
            &format!("tricklab/host/{}", self.rank),
            self.hosts[0].as_bytes(),
        )?;
        self.put(
            &format!("tricklab/pid/{}", self.rank),
            std::process::id().to_string().as_bytes(),
        )?;
        let values: Vec<(&str, &str)> = mine
            .iter()
            .map(|p| (p.what.as_str(), p.value.as_str()))
            .collect();
        self.put(
            &format!("tricklab/fingerprint/{}", self.rank),
            &serde_json::to_vec(&values)?,
        )?;
        if self.rank == 0 {
            for r in 1..self.world {
                let host = self.get(&format!("tricklab/host/{r}"))?;
                self.hosts.push(String::from_utf8_lossy(&host).into_owned());
            }
            let mut verdict = String::from("ok");
            for r in 1..self.world {
                let theirs = self.get(&format!("tricklab/fingerprint/{r}"))?;
                if let Some(why) = differs(r, mine, &theirs) {
                    verdict = why;
                    break;
                }
            }
            self.put("tricklab/verdict", verdict.as_bytes())?;
            if verdict != "ok" {
                // Rank 0 serves the store: it stays until every rank has
                // read why, or a rank would only see the store vanish.
                for r in 1..self.world {
                    let _ = self.get(&format!("tricklab/verdict-read/{r}"));
                }
                bail!("{verdict}");
            }
        } else {
            let verdict = self.get("tricklab/verdict")?;
            if verdict != b"ok" {
                self.put(&format!("tricklab/verdict-read/{}", self.rank), b"1")?;
                bail!("{}", String::from_utf8_lossy(&verdict));
            }
        }
        // Every rank put its host and pid before its fingerprint: no wait.
        for r in 0..self.world {
            let host =
                String::from_utf8_lossy(&self.get(&format!("tricklab/host/{r}"))?).into_owned();
            let pid = String::from_utf8_lossy(&self.get(&format!("tricklab/pid/{r}"))?)
                .parse()
                .unwrap_or(0);
            self.peers.push((host, pid));
        }
        Ok(())
    }

    /// A rank on this host whose process is stopped (SIGSTOP, a debugger),
    /// named as the gang's launcher names it: when this rank's collective
    /// failed, that rank is why, not this one that timed out waiting.
    pub fn stopped_peer(&self) -> Option<String> {
        let me = self.peers.get(self.rank)?;
        let (r, (_, pid)) = self.peers.iter().enumerate().find(|(r, (host, pid))| {
            *r != self.rank
                && *host == me.0
                && *pid != 0
                && crate::util::machine::process_state(*pid) == Some('T')
        })?;
        Some(format!(
            "rank {r} of {} (pid {pid}) stopped answering: its process is stopped (SIGSTOP or a debugger), and rank {} timed out waiting for it after {} s; the run failed: continue or end that process, and start the run again",
            self.world,
            self.rank,
            self.timeout.as_secs()
        ))
    }

    /// The ranks this rank's gang waited for when its collective timed out
    /// (`failure`), named through the rendezvous store, for a rank on
    /// another host whose /proc [`Self::stopped_peer`] cannot read. Every
    /// rank that times out marks itself (`tricklab/timed-out/R`) and waits
    /// a moment for the others' marks: the healthy ranks all time out in the
    /// one collective, and a rank left without a mark is the one they
    /// waited for (stopped, hung or slow). `None` for a failure that is not
    /// a timeout (a rank failing on its own must not blame the peers still
    /// waiting for it), when every rank marked itself, or when the store
    /// does not answer.
    pub fn silent_peers(&self, failure: &anyhow::Error) -> Option<String> {
        if !format!("{failure:#}").to_lowercase().contains("timed out") {
            return None;
        }
        let mark = |r: usize| format!("tricklab/timed-out/{r}");
        self.put(&mark(self.rank), b"1").ok()?;
        // A healthy rank that entered the collective a step later times
        // out a step later: wait that long, within the gang's timeout.
        let deadline = std::time::Instant::now() + self.timeout.min(Duration::from_secs(10));
        let silent = loop {
            let silent = (0..self.world)
                .filter(|&r| r != self.rank)
                .map(|r| Ok((r, self.has(&mark(r))?)))
                .collect::<Result<Vec<_>>>()
                .ok()?
                .into_iter()
                .filter_map(|(r, marked)| (!marked).then_some(r))
                .collect::<Vec<_>>();
            if silent.is_empty() || std::time::Instant::now() >= deadline {
                break silent;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        if silent.is_empty() {
            return None;
        }
        let named = silent
            .iter()
            .map(|&r| match self.peers.get(r) {
                Some((host, pid)) => format!("rank {r} of {} ({host}, pid {pid})", self.world),
                None => format!("rank {r} of {}", self.world),
            })
            .collect::<Vec<_>>()
            .join(", ");
        // "As the others did" only where there are others that waited.
        let others = if self.world - 1 > silent.len() {
            ", as the other ranks did,"
        } else {
            ""
        };
        Some(format!(
            "{named} did not answer: rank {} timed out waiting after {} s{others} while it never reached its own timeout (stopped, hung, or far slower than its peers); the run failed: look at that process on its host, and start the run again",
            self.rank,
            self.timeout.as_secs()
        ))
    }

    /// Whether `key` is in the rendezvous store now, without waiting.
    fn has(&self, key: &str) -> Result<bool> {
        let k = CString::new(key)?;
        // SAFETY: live store; the shim copies the key.
        match unsafe { tricklab_store_check(self.store, k.as_ptr()) } {
            1 => Ok(true),
            0 => Ok(false),
            _ => bail!("the rendezvous store did not answer: {}", last_error()),
        }
    }

    /// Sets `key` in the rendezvous store.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        let k = CString::new(key)?;
        // SAFETY: live store; the shim copies key and value.
        let ok = unsafe {
            tricklab_store_set(
                self.store,
                k.as_ptr(),
                value.as_ptr().cast(),
                value.len() as i64,
            )
        };
        if ok == 0 {
            bail!("the rendezvous store refused `{key}`: {}", last_error());
        }
        Ok(())
    }

    /// The value of `key`, waiting for it up to the timeout.
    pub fn get(&self, key: &str) -> Result<Vec<u8>> {
        let k = CString::new(key)?;
        let mut len = 0i64;
        // SAFETY: live store; the returned buffer is ours to free.
        let p = unsafe { tricklab_store_get(self.store, k.as_ptr(), &raw mut len) };
        if p.is_null() {
            bail!(
                "`{key}` did not arrive in the rendezvous store: {}",
                last_error()
            );
        }
        // SAFETY: the shim wrote `len` bytes at `p`.
        let v = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len as usize) }.to_vec();
        // SAFETY: allocated by the shim's malloc.
        unsafe { tricklab_buf_free(p) };
        Ok(v)
    }

    /// Every rank's `value` on rank 0, in rank order (through the store:
    /// small values, once a run); the other ranks get only their own.
    pub fn gather<T: serde::Serialize + serde::de::DeserializeOwned + Clone>(
        &self,
        name: &str,
        value: &T,
    ) -> Result<Vec<T>> {
        let n = self.gathers.get();
        self.gathers.set(n + 1);
        let key = |r: usize| format!("tricklab/{name}/{n}/{r}");
        if self.rank != 0 {
            self.put(&key(self.rank), &serde_json::to_vec(value)?)?;
            return Ok(vec![value.clone()]);
        }
        let mut all = vec![value.clone()];
        for r in 1..self.world {
            let bytes = self
                .get(&key(r))
                .map_err(|e| anyhow::anyhow!("rank {r} of {}: {e}", self.world))?;
            all.push(serde_json::from_slice(&bytes).with_context(|| {
                format!("rank {r}'s `{name}` is not readable: are all ranks the same build?")
            })?);
        }
        Ok(all)
    }

    fn call(&self, what: &str, f: impl FnOnce() -> c_int) -> Result<()> {
        if f() == 0 {
            bail!(
                "rank {} of {}: {what} failed: {}",
                self.rank,
                self.world,
                last_error()
            );
        }
        Ok(())
    }

    /// Sums each tensor over the ranks, in place.
    pub fn allreduce_sum(&self, ts: &[Tensor]) -> Result<()> {
        let ptrs: Vec<*const torch_sys::C_tensor> = ts.iter().map(|t| t.as_ptr()).collect();
        // SAFETY: the tensors outlive the call; the group is live.
        self.call("all-reduce", || unsafe {
            tricklab_pg_allreduce(self.group, ptrs.as_ptr(), ptrs.len() as c_int)
        })
    }

    /// Every rank's `ts` become rank `root`'s, in flat buckets (a c10d
    /// broadcast of several tensors wants them of one shape).
    pub fn broadcast(&self, ts: &[Tensor], root: usize) -> Result<()> {
        for bucket in buckets(ts, BUCKET_BYTES) {
            let views: Vec<Tensor> = bucket.iter().map(|t| t.reshape([-1])).collect();
            let flat = Tensor::cat(&views, 0);
            let ptr = [flat.as_ptr()];
            // SAFETY: the bucket outlives the call; the group is live.
            self.call("broadcast", || unsafe {
                tricklab_pg_broadcast(self.group, ptr.as_ptr(), 1, root as c_int)
            })?;
            unflatten(&flat, &bucket);
        }
        Ok(())
    }

    /// Makes this group the one SyncBN layers on this thread reduce over,
    /// until the guard is dropped.
    pub fn install(&self) -> Installed {
        INSTALLED.set(self.group);
        Installed(())
    }

    pub fn barrier(&self) -> Result<()> {
        // SAFETY: live group.
        self.call("barrier", || unsafe { tricklab_pg_barrier(self.group) })
    }

    /// This rank's share of a global batch: every world-th row from its
    /// rank on, as torch's DistributedSampler deals them. The shares are
    /// disjoint and together the one-process batch, and a rank's share is
    /// exactly the sub-batch ghost BN with world_size splits normalises
    /// together (it interleaves the same way).
    pub fn share(&self, t: Tensor) -> Tensor {
        if self.world <= 1 {
            return t;
        }
        let n = t.size()[0];
        t.slice(0, self.rank as i64, n, self.world as i64)
    }

    /// One data-parallel step's metrics over the ranks (its gradients are
    /// DDP's, reduced inside the backward): the gang's loss (the mean) and
    /// correct count (the sum), in one all-reduce.
    pub fn reduce_metrics(
        &self,
        loss: &Tensor,
        correct: &Tensor,
        took: bool,
    ) -> Result<(Tensor, Tensor)> {
        // The mean over the ranks that trained on images this step: a rank
        // whose batch had none readable sends a zero loss that is no loss.
        let trained = Tensor::full([], f64::from(u8::from(took)), (Kind::Float, loss.device()));
        let pack = scalar_pack(&[loss, correct, &trained]);
        self.allreduce_sum(std::slice::from_ref(&pack))?;
        let count = pack.get(1).round().to_kind(Kind::Int64);
        Ok((pack.get(0) / pack.get(2).clamp_min(1.0), count))
    }
}

/// PyTorch's DDP engine (c10d::Reducer) over a gang's trainable tensors.
/// Armed before a backward (`arm`), it all-reduces each bucket of
/// gradients as soon as the backward has filled it, overlapped with the
/// rest of the backward, and by the backward's end the gradients are the
/// gang's mean. A backward it was not armed for (an accumulation's earlier
/// micro-batches, DDP's `no_sync`) keeps its gradients local.
pub struct Ddp {
    handle: *mut c_void,
    /// The first failure of an `arm`, kept for `check`.
    failed: std::cell::RefCell<Option<String>>,
    rank: usize,
    world: usize,
}

impl Drop for Ddp {
    fn drop(&mut self) {
        // SAFETY: the handle came from tricklab_ddp_new, freed once; its
        // Reducer removes its autograd hooks.
        unsafe { tricklab_ddp_free(self.handle) }
    }
}

impl Ddp {
    /// The Reducer for `params` (every trainable tensor, in the same order
    /// on every rank; checked against rank 0's shapes and types).
    pub fn new(c: &Collective, params: &[Tensor], cuda: bool, o: DdpOptions) -> Result<Ddp> {
        let ptrs: Vec<*const torch_sys::C_tensor> = params.iter().map(Tensor::as_ptr).collect();
        let hook = match o.hook {
            CommHook::AllReduce => 0,
            CommHook::Fp16 => 1,
            CommHook::Bf16 => 2,
        };
        // SAFETY: the group is live; the tensors outlive the call (the
        // Reducer keeps its own references).
        let handle = unsafe {
            tricklab_ddp_new(
                c.group,
                cuda.into(),
                ptrs.as_ptr(),
                ptrs.len() as c_int,
                o.first_bucket_bytes as i64,
                o.bucket_bytes as i64,
                o.gradient_as_bucket_view.into(),
                hook,
            )
        };
        if handle.is_null() {
            bail!(
                "rank {} of {}: DDP's Reducer did not start: {}",
                c.rank,
                c.world,
                last_error()
            );
        }
        Ok(Ddp {
            handle,
            failed: std::cell::RefCell::new(None),
            rank: c.rank,
            world: c.world,
        })
    }

    /// Arms the Reducer for the next backward (DDP's forward). A failure
    /// is kept for `check`: it is called from inside a step's body.
    pub fn arm(&self) {
        // SAFETY: live handle.
        if unsafe { tricklab_ddp_prepare(self.handle) } == 0 && self.failed.borrow().is_none() {
            *self.failed.borrow_mut() = Some(last_error());
        }
    }

    /// The first failure since the last check, naming this rank.
    pub fn check(&self) -> Result<()> {
        match self.failed.borrow_mut().take() {
            Some(e) => bail!("rank {} of {}: DDP: {e}", self.rank, self.world),
            None => Ok(()),
        }
    }

    /// DDP's own averages over its sampled backwards (its Logger: the
    /// first ten steps, then one in a hundred); `None` before any.
    pub fn times(&self) -> Result<Option<DdpTimes>> {
        let (mut compute, mut comm, mut overlap) = (0i64, 0i64, 0i64);
        // SAFETY: live handle; the shim writes the three integers.
        let ok = unsafe { tricklab_ddp_stats(self.handle, &mut compute, &mut comm, &mut overlap) };
        if ok == 0 {
            bail!("DDP's statistics: {}", last_error());
        }
        let s = |ns: i64| ns as f64 * 1e-9;
        Ok(
            (compute > 0 && comm >= 0 && overlap >= 0).then(|| DdpTimes {
                backward_s: s(compute),
                allreduce_s: s(comm),
                hidden_s: s(overlap).min(s(comm)),
            }),
        )
    }

    /// Each bucket's size in bytes, in the order they are reduced.
    pub fn bucket_bytes(&self) -> Result<Vec<usize>> {
        // SAFETY: live handle; the string is malloc'ed by the shim.
        let p = unsafe { tricklab_ddp_buckets(self.handle) };
        if p.is_null() {
            bail!("DDP's buckets: {}", last_error());
        }
        // SAFETY: a NUL-terminated string from the shim, freed once below.
        let text = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        unsafe { tricklab_buf_free(p) };
        text.split(',')
            .filter(|b| !b.is_empty())
            .map(|b| b.parse().context("a bucket size"))
            .collect()
    }
}

/// A gang's gradient synchronisation over a net whose trainable set may
/// change (airbench's whitening bias stops training mid-run): DDP's
/// Reducer over the tensors that train now, built again when that set
/// changes, as a DDP over the new set would be (every rank changes it at
/// the same step).
pub struct GradSync {
    cuda: bool,
    opts: DdpOptions,
    current: std::cell::RefCell<Option<(Vec<bool>, Ddp)>>,
}

impl GradSync {
    pub fn new(cuda: bool, opts: DdpOptions) -> GradSync {
        GradSync {
            cuda,
            opts,
            current: std::cell::RefCell::new(None),
        }
    }

    /// Before a step: the Reducer over those of `params` that train now.
    pub fn follow(&self, c: &Collective, params: &[Tensor]) -> Result<()> {
        let trains: Vec<bool> = params.iter().map(Tensor::requires_grad).collect();
        let mut cur = self.current.borrow_mut();
        if cur.as_ref().is_some_and(|(t, _)| *t == trains) {
            return Ok(());
        }
        // The old Reducer's hooks go before the new one's arrive.
        *cur = None;
        let live: Vec<Tensor> = params
            .iter()
            .filter(|p| p.requires_grad())
            .map(Tensor::shallow_clone)
            .collect();
        *cur = Some((trains, Ddp::new(c, &live, self.cuda, self.opts)?));
        Ok(())
    }

    /// Arms the current Reducer for the next backward (see `Ddp::arm`).
    pub fn arm(&self) {
        if let Some((_, d)) = self.current.borrow().as_ref() {
            d.arm();
        }
    }

    pub fn check(&self) -> Result<()> {
        match self.current.borrow().as_ref() {
            Some((_, d)) => d.check(),
            None => Ok(()),
        }
    }

    /// The current Reducer's times (see `Ddp::times`).
    pub fn times(&self) -> Result<Option<DdpTimes>> {
        match self.current.borrow().as_ref() {
            Some((_, d)) => d.times(),
            None => Ok(None),
        }
    }

    /// The current Reducer's buckets in bytes, in the order they are reduced.
    pub fn bucket_bytes(&self) -> Result<Vec<usize>> {
        match self.current.borrow().as_ref() {
            Some((_, d)) => d.bucket_bytes(),
            None => Ok(Vec::new()),
        }
    }
}

/// Copies a flat bucket back into the tensors it was made of.
fn unflatten(flat: &Tensor, bucket: &[&Tensor]) {
    let mut off = 0;
    for t in bucket {
        let n = t.numel() as i64;
        t.shallow_clone().copy_(&flat.narrow(0, off, n).view_as(t));
        off += n;
    }
}

/// Whether a [`C10dLog`] holds this process's stderr now.
static REDIRECTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Where this process's stderr goes while c10d may write to it (a rank's
/// rendezvous): a log file of its own, the terminal restored after.
struct C10dLog {
    /// The terminal's stderr, duplicated.
    saved: c_int,
    path: std::path::PathBuf,
}

impl C10dLog {
    /// Stderr to `$TMPDIR/tricklab-rank{rank}-{pid}-c10d.log` until
    /// dropped or kept; `None` (stderr left alone) where that fails.
    fn start(rank: usize) -> Option<C10dLog> {
        use std::sync::atomic::Ordering;
        // One at a time: ranks joining on threads of one process (tests)
        // would each save the other's file as the terminal.
        if REDIRECTED
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return None;
        }
        let log = C10dLog::redirect(rank);
        if log.is_none() {
            REDIRECTED.store(false, Ordering::SeqCst);
        }
        log
    }

    fn redirect(rank: usize) -> Option<C10dLog> {
        use std::io::Write as _;
        use std::os::fd::AsRawFd as _;
        let path = std::env::temp_dir().join(format!(
            "tricklab-rank{rank}-{}-c10d.log",
            std::process::id()
        ));
        let file = std::fs::File::create(&path).ok()?;
        let _ = std::io::stderr().flush();
        // SAFETY: dup and dup2 of open descriptors; `file` stays open until
        // dup2 has made fd 2 its copy.
        let saved = unsafe { libc::dup(2) };
        if saved < 0 || unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
            if saved >= 0 {
                // SAFETY: our own duplicate, closed once.
                unsafe { libc::close(saved) };
            }
            let _ = std::fs::remove_file(&path);
            return None;
        }
        Some(C10dLog { saved, path })
    }

    /// Stderr back to the terminal; the log's path if c10d wrote to it.
    fn keep(self) -> Option<std::path::PathBuf> {
        self.restore();
        let path = self.path.clone();
        std::mem::forget(self);
        match std::fs::metadata(&path) {
            Ok(m) if m.len() > 0 => Some(path),
            _ => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    fn restore(&self) {
        // SAFETY: `saved` is the terminal's stderr, duplicated in `start`
        // and closed once, here.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
        REDIRECTED.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for C10dLog {
    /// A join that succeeded: its retries are no one's concern.
    fn drop(&mut self) {
        self.restore();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One thing every rank of a gang must share, compared at the rendezvous
/// so that a mismatch names it: the binary, the run, the data's identity,
/// an option that changes what the ranks do together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// What it is, as the line names it: `binary`, `data set `imagenet``.
    pub what: String,
    /// Its value on this rank: a hash, or a word (`on`, `off`).
    pub value: String,
    /// What to do when the ranks differ in it.
    pub fix: &'static str,
}

/// Why rank `r`'s fingerprint (`theirs`, as it published it) is not rank
/// 0's (`mine`): the first part that differs, in one line; `None` if none.
fn differs(r: usize, mine: &[Part], theirs: &[u8]) -> Option<String> {
    let other_build = || {
        format!(
            "rank {r} runs a different binary than rank 0 (its rendezvous fingerprint is another build's): start every rank from the same build"
        )
    };
    let Ok(theirs) = serde_json::from_slice::<Vec<(String, String)>>(theirs) else {
        return Some(other_build());
    };
    if theirs.len() != mine.len() {
        return Some(other_build());
    }
    for (p, (what, v)) in mine.iter().zip(&theirs) {
        if *what != p.what {
            return Some(other_build());
        }
        if *v != p.value {
            return Some(format!(
                "rank {r}'s {} differs from rank 0's ({} on rank {r}, {} on rank 0): {}",
                p.what,
                short(v),
                short(&p.value),
                p.fix
            ));
        }
    }
    None
}

fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}

/// Consecutive tensors of one kind and device, at most `cap` bytes a bucket
/// (a tensor larger than `cap` is a bucket of its own).
fn buckets(ts: &[Tensor], cap: usize) -> Vec<Vec<&Tensor>> {
    let mut out: Vec<Vec<&Tensor>> = Vec::new();
    let mut bytes = 0;
    for t in ts {
        let size = t.numel() * t.kind().elt_size_in_bytes();
        let fits = out.last().is_some_and(|b| {
            let head = b[0];
            head.kind() == t.kind() && head.device() == t.device() && bytes + size <= cap
        });
        if fits {
            out.last_mut().expect("a bucket").push(t);
            bytes += size;
        } else {
            out.push(vec![t]);
            bytes = size;
        }
    }
    out
}

/// The one float tensor a step's metrics travel in beside its gradients.
fn scalar_pack(values: &[&Tensor]) -> Tensor {
    let v: Vec<Tensor> = values
        .iter()
        .map(|t| t.to_kind(Kind::Float).reshape([1]))
        .collect();
    Tensor::cat(&v, 0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn placement_names_each_host_once_with_its_ranks() {
        let h = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(
            placement(&h(&["n1", "n2"])),
            "2 ranks on 2 hosts: n1 (rank 0), n2 (rank 1)"
        );
        assert_eq!(
            placement(&h(&["a", "a", "a", "b", "b", "a"])),
            "6 ranks on 2 hosts: a (ranks 0-2), b (ranks 3-4), a (rank 5)"
        );
        assert_eq!(
            placement(&h(&["vm", "vm"])),
            "2 ranks on 1 host: vm (ranks 0-1)"
        );
    }

    /// A rank that never enters the collective (here: a thread that joined
    /// and then waits; in life a rank stopped on another host, whose /proc
    /// no peer can read) is named by the ranks that timed out waiting for
    /// it: each marks itself in the store, and the one without a mark is
    /// the one they waited for. A failure that is no timeout blames no one.
    #[test]
    fn the_ranks_that_time_out_name_the_one_that_never_did() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
        let ranks: Vec<_> = (0..3)
            .map(|rank| {
                let done = std::sync::Arc::clone(&done_rx);
                std::thread::spawn(move || {
                    let launch = Launch::on_this_machine(rank, 3, port);
                    let gang =
                        Collective::join(&launch, false, &[], Duration::from_secs(3)).unwrap();
                    if rank == 2 {
                        // Holds its connections open, in no collective.
                        let _ = done.lock().unwrap().recv();
                        return None;
                    }
                    let e = gang
                        .allreduce_sum(&[Tensor::ones([4], (Kind::Float, tch::Device::Cpu))])
                        .expect_err("rank 2 never joins the all-reduce");
                    assert!(
                        gang.silent_peers(&anyhow::anyhow!("a rank's own bug"))
                            .is_none()
                    );
                    Some(gang.silent_peers(&e))
                })
            })
            .collect();
        let mut ranks = ranks.into_iter();
        let (r0, r1, r2) = (
            ranks.next().unwrap(),
            ranks.next().unwrap(),
            ranks.next().unwrap(),
        );
        let (said0, said1) = (r0.join().unwrap(), r1.join().unwrap());
        done_tx.send(()).unwrap();
        r2.join().unwrap();
        for (rank, said) in [(0, said0), (1, said1)] {
            let line = said
                .flatten()
                .unwrap_or_else(|| panic!("rank {rank} named no one"));
            assert!(
                line.starts_with("rank 2 of 3 (")
                    && line.contains(&format!(
                        "did not answer: rank {rank} timed out waiting after 3 s"
                    )),
                "{line}"
            );
            assert!(
                !line.contains("rank 0 of 3") && !line.contains("rank 1 of 3"),
                "{line}"
            );
        }
    }

    /// Two Gloo ranks (threads) step one backward through DDP's Reducer: each
    /// rank's gradients become the mean of both, exactly with the default
    /// all-reduce and rounded through fp16 (or bf16) with a compression hook;
    /// buckets follow the sizes asked; an unarmed backward stays local.
    #[test]
    pub(crate) fn ddp_averages_the_gradients_in_buckets_and_its_hooks_round_them() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Rank r's gradient of w is x_r: thirds, which fp16 cannot hold.
        let x = |r: usize| {
            Tensor::from_slice(&[1.0f32 / 3.0, 2.0 / 3.0, 0.1, 7.0 / 3.0]) * (r + 1) as f64
        };
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                std::thread::spawn(move || {
                    let launch = crate::dist::env::Launch::on_this_machine(rank, 2, port);
                    let c = Collective::join(&launch, false, &[], Duration::from_secs(20)).unwrap();
                    // Rank 0 learns every rank's host at the rendezvous.
                    let host = crate::util::machine::hostname();
                    assert_eq!(c.hosts, vec![host; if rank == 0 { 2 } else { 1 }]);
                    let mut seen = Vec::new();
                    for hook in [CommHook::AllReduce, CommHook::Fp16, CommHook::Bf16] {
                        let w = Tensor::zeros([4], (Kind::Float, tch::Device::Cpu))
                            .set_requires_grad(true);
                        let b = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu))
                            .set_requires_grad(true);
                        // 16 bytes of w after a first bucket of 8 (b's): two buckets.
                        let o = DdpOptions {
                            first_bucket_bytes: 8,
                            bucket_bytes: 16,
                            hook,
                            ..DdpOptions::default()
                        };
                        let ddp = Ddp::new(&c, &[w.shallow_clone(), b.shallow_clone()], false, o)
                            .unwrap();
                        let loss = || (&w * x(rank)).sum(Kind::Float) + b.sum(Kind::Float);
                        // Unarmed (accumulation's no_sync): the rank's own.
                        loss().backward();
                        let local = w.grad().copy();
                        let mut g = w.grad();
                        let _ = g.zero_();
                        ddp.arm();
                        loss().backward();
                        ddp.check().unwrap();
                        // DDP's own clock took this sampled step.
                        let t = ddp.times().unwrap().expect("a sampled step's times");
                        assert!(
                            t.backward_s > 0.0 && t.hidden_s <= t.allreduce_s,
                            "{hook:?}: {t:?}"
                        );
                        seen.push((hook, local, w.grad().copy(), ddp.bucket_bytes().unwrap()));
                    }
                    seen
                })
            })
            .collect();
        let seen: Vec<_> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
        let mean = (x(0) + x(1)) / 2.0;
        for (rank, runs) in seen.iter().enumerate() {
            for (hook, local, reduced, buckets) in runs {
                assert!(
                    local.equal(&x(rank)),
                    "rank {rank}: an unarmed backward stays local"
                );
                assert_eq!(buckets.iter().sum::<usize>(), 24, "{hook:?}: {buckets:?}");
                assert!(buckets.len() >= 2, "{hook:?}: {buckets:?}");
                let off = f64::try_from((reduced - &mean).abs().max()).unwrap();
                match hook {
                    CommHook::AllReduce => assert!(off < 1e-7, "{hook:?}: {off}"),
                    // fp16 keeps 11 bits (3.5 is at most 2^-11·2 off), bf16 8.
                    CommHook::Fp16 => assert!(off > 1e-6 && off < 4e-3, "{hook:?}: {off}"),
                    CommHook::Bf16 => assert!(off > 1e-4 && off < 3e-2, "{hook:?}: {off}"),
                }
            }
        }
    }

    /// Rank 0 names the first part a rank differs in, with both values and
    /// the fix; a fingerprint of other parts, or none that reads, is
    /// another build's.
    #[test]
    fn a_fingerprint_mismatch_names_the_rank_the_part_and_the_fix() {
        let part = |what: &str, value: &str| Part {
            what: what.into(),
            value: value.into(),
            fix: "do the same everywhere",
        };
        let mine = [
            part("binary", "b1"),
            part("data set `imgs`", &"a".repeat(64)),
        ];
        let json = |v: &[(&str, &str)]| serde_json::to_vec(v).unwrap();
        let same = json(&[("binary", "b1"), ("data set `imgs`", &"a".repeat(64))]);
        assert_eq!(differs(1, &mine, &same), None);
        let other = json(&[("binary", "b1"), ("data set `imgs`", &"c".repeat(64))]);
        assert_eq!(
            differs(3, &mine, &other).unwrap(),
            "rank 3's data set `imgs` differs from rank 0's (cccccccccccc on rank 3, aaaaaaaaaaaa on rank 0): do the same everywhere"
        );
        for theirs in [json(&[("binary", "b1")]), b"0123abcd".to_vec()] {
            let line = differs(1, &mine, &theirs).unwrap();
            assert!(line.starts_with("rank 1 runs a different binary"), "{line}");
        }
    }

    #[test]
    fn buckets_keep_kinds_apart_and_respect_the_cap() {
        let f = |n: i64| Tensor::zeros([n], (Kind::Float, tch::Device::Cpu));
        let d = Tensor::zeros([4], (Kind::Double, tch::Device::Cpu));
        let ts = [f(10), f(10), d, f(30), f(1)];
        // 10 floats = 40 bytes; a cap of 100 bytes holds two of them.
        let sizes: Vec<Vec<i64>> = buckets(&ts, 100)
            .iter()
            .map(|b| b.iter().map(|t| t.numel() as i64).collect())
            .collect();
        assert_eq!(sizes, vec![vec![10, 10], vec![4], vec![30], vec![1]]);
    }
}
