//! c10d's bindings: the TCPStore, the process groups (Gloo, NCCL) and
//! SyncBatchNorm's reductions, as src/native/native.cpp exports them. The
//! safe handle over them is `dist::group`.

use std::ffi::{c_char, c_int, c_void};

unsafe extern "C" {
    pub fn tricklab_last_error() -> *const c_char;
    pub fn tricklab_collectives() -> *const c_char;
    pub fn tricklab_store_new(
        host: *const c_char,
        port: c_int,
        is_server: c_int,
        world: c_int,
        timeout_ms: i64,
        prefix: *const c_char,
    ) -> *mut c_void;
    pub fn tricklab_store_free(s: *mut c_void);
    pub fn tricklab_store_set(
        s: *mut c_void,
        key: *const c_char,
        v: *const c_char,
        len: i64,
    ) -> c_int;
    pub fn tricklab_store_get(s: *mut c_void, key: *const c_char, len: *mut i64) -> *mut c_char;
    pub fn tricklab_store_check(s: *mut c_void, key: *const c_char) -> c_int;
    pub fn tricklab_buf_free(b: *mut c_char);
    pub fn tricklab_pg_new(
        s: *mut c_void,
        nccl: c_int,
        rank: c_int,
        size: c_int,
        timeout_ms: i64,
        iface: *const c_char,
        loopback: c_int,
    ) -> *mut c_void;
    pub fn tricklab_pg_free(g: *mut c_void);
    pub fn tricklab_pg_allreduce(
        g: *mut c_void,
        ts: *const *const torch_sys::C_tensor,
        n: c_int,
    ) -> c_int;
    pub fn tricklab_pg_broadcast(
        g: *mut c_void,
        ts: *const *const torch_sys::C_tensor,
        n: c_int,
        root: c_int,
    ) -> c_int;
    pub fn tricklab_pg_barrier(g: *mut c_void) -> c_int;
    pub fn tricklab_ddp_new(
        g: *mut c_void,
        cuda: c_int,
        params: *const *const torch_sys::C_tensor,
        n: c_int,
        first_cap: i64,
        cap: i64,
        grad_view: c_int,
        hook: c_int,
    ) -> *mut c_void;
    pub fn tricklab_ddp_prepare(d: *mut c_void) -> c_int;
    pub fn tricklab_ddp_stats(
        d: *mut c_void,
        compute_ns: *mut i64,
        comm_ns: *mut i64,
        overlap_ns: *mut i64,
    ) -> c_int;
    pub fn tricklab_ddp_buckets(d: *mut c_void) -> *mut c_char;
    pub fn tricklab_ddp_free(d: *mut c_void);
    pub fn tricklab_sync_batch_norm(
        g: *mut c_void,
        x: *const torch_sys::C_tensor,
        weight: *const torch_sys::C_tensor,
        bias: *const torch_sys::C_tensor,
        running_mean: *const torch_sys::C_tensor,
        running_var: *const torch_sys::C_tensor,
        momentum: f64,
        eps: f64,
    ) -> *mut torch_sys::C_tensor;
}
