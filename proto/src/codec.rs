//! The protobuf codec of every generated client and server: tonic-prost's encoder and decoder
//! with small starting buffers.
//!
//! tonic starts every request's and response's encode and decode buffer at 8 KiB, so a worker
//! with 64 calls in flight held about 1 MiB of mostly empty buffers (`tutti-bench`, worker RSS
//! under load). Our messages are usually a few hundred bytes; the buffers still grow to fit
//! anything larger (up to the message size limits), so only the starting size changes.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// Starting size of an encode or decode buffer.
const BUFFER_SIZE: usize = 1024;
/// tonic's default: how much a streaming encoder buffers before it yields.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// See the module documentation. Named in the generated code (`build.rs`, `codec_path`).
#[derive(Debug, Clone, Copy)]
pub struct LeanCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for LeanCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for LeanCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD))
    }
}
