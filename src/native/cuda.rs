//! CUDA through c10 and ATen (native.cpp), where tch binds nothing: graphs
//! (`at::cuda::CUDAGraph`), a side stream to warm up and capture on, one
//! memory pool the graphs of a run share, and timing events.

use std::ffi::{c_int, c_void};

use super::last_error;
use anyhow::{Result, bail};

unsafe extern "C" {
    fn tricklab_cuda_graphs_built() -> c_int;
    fn tricklab_side_stream_enter(index: c_int) -> *mut c_void;
    fn tricklab_side_stream_exit(h: *mut c_void) -> c_int;
    fn tricklab_graph_pool_new() -> *mut c_void;
    fn tricklab_graph_pool_free(p: *mut c_void);
    fn tricklab_graph_new() -> *mut c_void;
    fn tricklab_graph_free(g: *mut c_void);
    fn tricklab_graph_capture_begin(g: *mut c_void, pool: *mut c_void) -> c_int;
    fn tricklab_graph_capture_end(g: *mut c_void) -> c_int;
    fn tricklab_graph_replay(g: *mut c_void) -> c_int;
    fn tricklab_event_new(index: c_int) -> *mut c_void;
    fn tricklab_event_record(ev: *mut c_void, index: c_int) -> c_int;
    fn tricklab_event_elapsed_ms(a: *mut c_void, b: *mut c_void) -> f64;
    fn tricklab_event_free(ev: *mut c_void);
}

/// Whether this binary was built with the CUDA headers CUDAGraph needs.
pub fn built() -> bool {
    // SAFETY: a constant.
    unsafe { tricklab_cuda_graphs_built() != 0 }
}

/// While alive, a side stream of CUDA device `index` is the current one;
/// it waited for the previous stream's work first, and the previous stream
/// waits for its work when this drops.
pub struct SideStream(*mut c_void);

impl SideStream {
    pub fn enter(index: usize) -> Result<SideStream> {
        // SAFETY: returns an owned handle or null with the error set.
        let h = unsafe { tricklab_side_stream_enter(index as c_int) };
        if h.is_null() {
            bail!("side stream on cuda:{index}: {}", last_error());
        }
        Ok(SideStream(h))
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        // SAFETY: the handle came from enter and is freed once, here.
        unsafe { tricklab_side_stream_exit(self.0) };
    }
}

/// The memory pool every graph of one run captures into.
pub struct GraphPool(*mut c_void);

impl GraphPool {
    pub fn new() -> Result<GraphPool> {
        // SAFETY: returns an owned handle or null with the error set.
        let p = unsafe { tricklab_graph_pool_new() };
        if p.is_null() {
            bail!("CUDA graph pool: {}", last_error());
        }
        Ok(GraphPool(p))
    }
}

impl Drop for GraphPool {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { tricklab_graph_pool_free(self.0) }
    }
}

/// One captured CUDA graph.
pub struct CudaGraph(*mut c_void);

// SAFETY: the graph is used by the one worker thread that owns the run.
unsafe impl Send for CudaGraph {}
unsafe impl Send for GraphPool {}

impl CudaGraph {
    /// Captures what `body` launches on the current stream (which must not
    /// be the default one: see [`SideStream`]) into a graph allocating from
    /// `pool`. Nothing runs: replay it to execute. A body that panics, or
    /// launches something capture forbids (a host sync, say), gives an
    /// error naming why, and the capture is ended.
    pub fn capture<T>(pool: &GraphPool, body: impl FnOnce() -> T) -> Result<(CudaGraph, T)> {
        // SAFETY: an owned graph or null.
        let g = unsafe { tricklab_graph_new() };
        if g.is_null() {
            bail!("CUDA graph: {}", last_error());
        }
        let graph = CudaGraph(g);
        // SAFETY: both handles live.
        if unsafe { tricklab_graph_capture_begin(g, pool.0) } == 0 {
            bail!("CUDA graph capture: {}", last_error());
        }
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        // SAFETY: live graph in capture; ending it also when the body failed.
        let ended = unsafe { tricklab_graph_capture_end(g) } != 0;
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                let why = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                bail!("the step could not be captured: {}", first_line(&why));
            }
        };
        if !ended {
            bail!(
                "the step could not be captured: {}",
                first_line(&last_error())
            );
        }
        Ok((graph, out))
    }

    /// Launches the whole captured graph on the current stream.
    pub fn replay(&self) -> Result<()> {
        // SAFETY: a captured graph.
        if unsafe { tricklab_graph_replay(self.0) } == 0 {
            bail!("CUDA graph replay: {}", first_line(&last_error()));
        }
        Ok(())
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { tricklab_graph_free(self.0) }
    }
}

/// A CUDA timing event, recorded on its device's current stream.
pub struct Event {
    ev: *mut c_void,
    index: usize,
}

// SAFETY: recorded and read by the one worker thread that owns the run.
unsafe impl Send for Event {}

impl Event {
    /// A timing event of CUDA device `index`, not yet recorded.
    pub fn new(index: usize) -> Result<Event> {
        // SAFETY: an owned event or null.
        let ev = unsafe { tricklab_event_new(index as c_int) };
        if ev.is_null() {
            bail!("CUDA event: {}", last_error());
        }
        Ok(Event { ev, index })
    }

    /// Records it (again) on its device's current stream.
    pub fn record(&self) -> Result<()> {
        // SAFETY: a live event.
        if unsafe { tricklab_event_record(self.ev, self.index as c_int) } == 0 {
            bail!("CUDA event record: {}", first_line(&last_error()));
        }
        Ok(())
    }

    /// Seconds from this event to `later`; both must have completed (the
    /// caller synchronised the device).
    pub fn seconds_to(&self, later: &Event) -> Result<f64> {
        // SAFETY: two live events.
        let ms = unsafe { tricklab_event_elapsed_ms(self.ev, later.ev) };
        if ms < 0.0 {
            bail!("CUDA event time: {}", first_line(&last_error()));
        }
        Ok(ms / 1e3)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { tricklab_event_free(self.ev) }
    }
}

/// libtorch's messages run to many lines of C++ backtrace; one is enough.
fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}
