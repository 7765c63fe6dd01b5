//! Generates the Rust bindings for the plugin protocols.
//!
//! The `.proto` sources in `proto/` are parsed with `protox` (pure Rust, so no
//! system `protoc` is needed; it also bundles the `google/protobuf/*.proto`
//! well-known types) into a `FileDescriptorSet`, which `tonic-prost-build`
//! turns into prost messages plus tonic clients and servers in `OUT_DIR`.

use std::path::PathBuf;

/// Every protocol file, relative to the `proto/` include directory.
const PROTO_FILES: &[&str] = &[
    "tfplugin5.proto",
    "tfplugin6.proto",
    "grpc_controller.proto",
    "grpc_stdio.proto",
    "grpc_broker.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", proto_dir.display());
    for file in PROTO_FILES {
        println!("cargo:rerun-if-changed={}", proto_dir.join(file).display());
    }

    let fds = protox::compile(PROTO_FILES, [&proto_dir])?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Every server trait method gets a default body returning
        // `Status::unimplemented`, so in-process fakes only implement the
        // RPCs a test needs. Server-streaming methods then return
        // `tonic::codegen::BoxStream<T>` instead of an associated type.
        .generate_default_stubs(true)
        .compile_fds(fds)?;

    Ok(())
}
