//! Generates the gRPC service code from `proto/infer_stream.proto` for the
//! `serve` feature. The proto is parsed by `protox` (pure Rust), so building
//! needs no system `protoc`; a build without `serve` generates nothing.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/infer_stream.proto");
    #[cfg(feature = "serve")]
    {
        let fds = protox::compile(["infer_stream.proto"], ["proto"])?;
        tonic_prost_build::configure().build_client(false).build_transport(false).compile_fds(fds)?;
    }
    Ok(())
}
