fn main() {
    std::process::exit(tricklab::cli::main());
}
