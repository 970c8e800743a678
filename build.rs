// torch-sys links libtorch but its rpath does not reach our binaries, and the
// linker's --as-needed drops libtorch_cuda.so (nothing references it by symbol),
// which silently turns a CUDA-capable build into a CPU-only one.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        let cuda = std::path::Path::new(&lib).join("libtorch_cuda.so");
        if cuda.exists() {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
            println!("cargo:rustc-link-arg=-ltorch_cuda");
            println!("cargo:rustc-link-arg=-Wl,--as-needed");
        }
    }
}
