fn main() {
    // Die quietly on a closed pipe (`tricklab tricks | head`) like other CLI tools,
    // instead of panicking inside println!.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::process::exit(tricklab::cli::main());
}
