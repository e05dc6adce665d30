fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fds = protox::compile(
        [
            "tutti/kernel/v1/kernel.proto",
            "tutti/kernel/v1/market.proto",
            "tutti/worker/v1/worker.proto",
        ],
        ["."],
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Small starting buffers instead of tonic's 8 KiB per message (src/codec.rs).
        .codec_path("crate::codec::LeanCodec")
        // A tool result as `bytes::Bytes`: sliced from a frame, never copied.
        .bytes(".tutti.worker.v1.CallToolReply.result_bytes")
        // Messages with secret values get a hand-written Debug (src/redacted.rs).
        .skip_debug([
            ".tutti.kernel.v1.LaunchSpec",
            ".tutti.kernel.v1.ResolveShimReply",
            ".tutti.kernel.v1.ConnectRequest",
            ".tutti.kernel.v1.CompleteLoginRequest",
            ".tutti.kernel.v1.RefreshWorkerTokenRequest",
            ".tutti.kernel.v1.RefreshWorkerTokenReply",
        ])
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=tutti");
    Ok(())
}
