//! With the `tch` feature, lets the digits binaries find LibTorch's libraries at run time
//! without `LD_LIBRARY_PATH`: torch-sys (a direct dependency for this) says where they are.

fn main() {
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
