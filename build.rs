// torch-sys links libtorch but its rpath does not reach our binaries, and the
// linker's --as-needed drops libtorch_cuda.so (nothing references it by symbol),
// which silently turns a CUDA-capable build into a CPU-only one.
//
// It also compiles src/native/native.cpp, the few ATen calls tch does not bind,
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
    // A commit on the checked-out branch rewrites that branch's file, not
    // the folder (the H200's fourth lease ran a binary that named the commit
    // before its own): watch the file HEAD names, and packed-refs.
    // Each watched only where it exists: a missing path would rerun every build.
    let branch = std::fs::read_to_string(".git/HEAD")
        .ok()
        .and_then(|h| h.trim().strip_prefix("ref: ").map(|b| format!(".git/{b}")));
    for path in branch.into_iter().chain([".git/packed-refs".to_string()]) {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    println!("cargo:rerun-if-changed=src/native/native.cpp");
    // The `turbojpeg` feature's region decode: libjpeg-turbo's libjpeg API
    // (libjpeg62-turbo-dev, which scripts/system-deps.sh turbojpeg installs).
    if std::env::var_os("CARGO_FEATURE_TURBOJPEG").is_some() {
        println!("cargo:rerun-if-changed=src/native/jpeg_region.c");
        cc::Build::new()
            .file("src/native/jpeg_region.c")
            .warnings(false)
            .compile("tricklab_jpeg_region");
        println!("cargo:rustc-link-lib=jpeg");
    }
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .expect("torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB): set LIBTORCH");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    let lib = std::path::Path::new(&lib);
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        // native.cpp's CUDA graphs, streams and events (c10::cuda).
        if lib.join("libc10_cuda.so").exists() {
            println!("cargo:rustc-link-arg=-lc10_cuda");
        }
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
    let root = lib.parent().expect("libtorch's lib folder has a parent");
    // PyTorch wheels since 2.6 (and libtorch 2.11's cxx11 builds) use the new ABI.
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
    let mut build = cc::Build::new();
    for (define, value) in collectives(root, &mut build) {
        build.define(define, value);
    }
    build
        .cpp(true)
        .file("src/native/native.cpp")
        .include(root.join("include"))
        // c10d's headers reach into the C++ frontend's (torch/types.h).
        .include(root.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .compile("tricklab_native");
}

/// c10d's process groups compiled in where their headers are found: Gloo
/// needs gloo's own headers, which the torch wheel does not ship (Debian's
/// libgloo-dev, installed by scripts/system-deps.sh; only pointers to gloo
/// types cross into our code, so its commit need not be torch's); NCCL needs
/// the CUDA runtime headers and nccl.h (the wheel's nvidia-* packages, or a
/// CUDA toolkit). A build without them is a CPU-only build whose `doctor`
/// says which collectives it has.
fn collectives(
    torch: &std::path::Path,
    build: &mut cc::Build,
) -> Vec<(&'static str, &'static str)> {
    use std::path::PathBuf;
    println!("cargo:rerun-if-env-changed=TRICKLAB_GLOO_INCLUDE");
    println!("cargo:rerun-if-env-changed=TRICKLAB_CUDA_INCLUDE");
    let mut defines = Vec::new();
    let gloo = std::env::var("TRICKLAB_GLOO_INCLUDE")
        .map_or_else(|_| PathBuf::from("/usr/include"), PathBuf::from);
    let gloo_header = gloo.join("gloo/context.h");
    if gloo_header.exists() {
        println!("cargo:rerun-if-changed={}", gloo_header.display());
        build.include(&gloo);
        defines.extend([("USE_C10D_GLOO", "1"), ("TRICKLAB_C10D_GLOO", "1")]);
    } else {
        println!(
            "cargo:warning=no gloo headers at {}: this build has no CPU collectives (install libgloo-dev: scripts/system-deps.sh)",
            gloo.display()
        );
    }
    // site-packages/torch → site-packages/nvidia/{cu13,nccl}/include
    let nvidia = torch.parent().map(|p| p.join("nvidia")).unwrap_or_default();
    let cuda = std::env::var("TRICKLAB_CUDA_INCLUDE")
        .map_or_else(|_| nvidia.join("cu13/include"), PathBuf::from);
    let nccl = nvidia.join("nccl/include");
    let found = cuda.join("cuda_runtime.h").exists()
        && cuda.join("crt/host_config.h").exists()
        && nccl.join("nccl.h").exists();
    if found {
        build.include(&cuda).include(&nccl);
        defines.extend([
            ("USE_C10D_NCCL", "1"),
            ("USE_CUDA", "1"),
            ("TRICKLAB_C10D_NCCL", "1"),
            // CUDA graphs (native.cpp) need the same runtime headers.
            ("TRICKLAB_CUDA", "1"),
        ]);
    }
    defines
}
