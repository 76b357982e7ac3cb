fn main() { println!("{:?}", flashrs::init().err()); }
