fn main() {
    match flashrs::Gpu::new(0) {
        Ok(g) => println!("{} {:?}", g.name().unwrap(), g.arch()),
        Err(e) => { eprintln!("error: {e}"); std::process::exit(1) }
    }
}
