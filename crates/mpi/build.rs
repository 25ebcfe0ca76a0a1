//! Compiles the C shim that hands Rust the MPI library's `MPI_IN_PLACE`, against the same MPI
//! that rsmpi's build found.

fn main() {
    println!("cargo:rerun-if-changed=csrc/in_place.c");
    let lib = match build_probe_mpi::probe() {
        Ok(lib) => lib,
        Err(reasons) => {
            for reason in reasons {
                println!("cargo:warning=MPI not found: {reason}");
            }
            panic!("ember-mpi needs an MPI library (libopenmpi-dev)");
        }
    };
    let mut build = cc::Build::new();
    build.file("csrc/in_place.c");
    match lib.mpicc {
        Some(mpicc) => {
            build.compiler(mpicc);
        }
        None => {
            build.includes(&lib.include_paths);
        }
    }
    build.compile("ember_mpi_shim");
}
