// torch-sys links libtorch but its rpath does not reach our binaries, and the
// linker's --as-needed drops libtorch_cuda.so (nothing references it by symbol),
// which silently turns a CUDA-capable build into a CPU-only one.
//
// It also compiles src/util/native.cpp, the few ATen calls tch does not bind,
// against the same libtorch headers.
fn main() {
    // The commit the binary was built from: shards of one sweep must come from
    // one binary, whatever the working tree's HEAD is when each task starts.
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TRICKLAB_BUILD_COMMIT={commit}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    println!("cargo:rerun-if-changed=src/util/native.cpp");
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .expect("torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB): set LIBTORCH");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    let lib = std::path::Path::new(&lib);
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
    let root = lib.parent().expect("libtorch's lib folder has a parent");
    // PyTorch wheels since 2.6 (and libtorch 2.11's cxx11 builds) use the new ABI.
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
    cc::Build::new()
        .cpp(true)
        .file("src/util/native.cpp")
        .include(root.join("include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .compile("tricklab_native");
}
