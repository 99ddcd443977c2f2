//! One writer writing its partition of a dataset being staged (GW-1): the read engine's
//! driver with blocks going the other way (see `crate::scan`'s module docs).

use crate::client::Client;
use crate::dataset::ProgressFn;
use crate::error::{ClientError, Result};
use crate::scan::{BlockSource, ReadOptions, ReadReport, ReadStream};
use ganges_core::ids::NodeId;
use ganges_core::shape::{Partition, Piece};
use ganges_proto::manifest::Manifest;
use std::sync::Arc;

/// One writer writing its partition of a dataset being staged (GW-1). See the module docs.
#[derive(Debug)]
pub struct WriteStream {
    inner: ReadStream,
}

/// Where one block landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub piece: Piece,
    pub node: NodeId,
    pub crc: u32,
}

impl WriteStream {
    /// Prepare to write `partition` of the dataset `manifest` describes, staged as `txid`.
    /// Pieces must be whole blocks (a partition on block boundaries).
    pub fn open(
        client: Arc<Client>,
        manifest: Arc<Manifest>,
        txid: u64,
        partition: Partition,
        opts: ReadOptions,
        source: Arc<dyn BlockSource>,
    ) -> Result<WriteStream> {
        let mut inner = ReadStream::open(client, manifest, partition, opts)?;
        if let Some(p) = inner.engine.pieces().iter().find(|p| !p.is_whole_block(&inner.manifest.shape)) {
            return Err(ClientError::Invalid(format!(
                "a writer writes whole blocks; its partition cuts {} block {}",
                p.fragment, p.block
            )));
        }
        inner.start_writing(txid, source);
        Ok(WriteStream { inner })
    }

    /// Share where each block lands, as it happens, in `log` (several writers may share one).
    pub fn log_placed(&mut self, log: crate::scan::PlacedLog) {
        self.inner.log_placed(log);
    }

    /// Write the whole partition; `progress` hears each block's bytes.
    pub async fn run(&mut self, progress: Option<&ProgressFn>) -> Result<()> {
        while let Some(b) = self.inner.next().await? {
            if let Some(p) = progress {
                p(self.inner.engine.piece(b.piece).len as u64);
            }
        }
        Ok(())
    }

    /// Every block written, with the server that wrote it (a block may appear twice: a
    /// steal whose cancel came too late wrote it on both copies).
    pub fn placed(&self) -> Vec<Placed> {
        let engine = &self.inner.engine;
        self.inner.placed().iter().map(|&(i, node, crc)| Placed { piece: *engine.piece(i), node, crc }).collect()
    }

    pub fn report(&self) -> ReadReport {
        self.inner.report()
    }

    /// Stop: cancel what is still queued at servers.
    pub fn close(self) -> ReadReport {
        self.inner.close()
    }
}
