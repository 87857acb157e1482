fn main() {
    std::process::exit(lapilli_cli::run(std::env::args_os()));
}
