//! One writer writing its partition of a dataset being staged (GW-1): the read engine's
//! driver with blocks going the other way (see `crate::scan`'s module docs).

use crate::client::Client;
use crate::dataset::ProgressFn;
use crate::error::{ClientError, Result};
use crate::scan::{BlockSource, PlacedLog, ReadOptions, ReadReport, ReadStream};
use ganges_core::shape::Partition;
use ganges_proto::manifest::Manifest;
use std::sync::Arc;

/// One writer writing its partition of a dataset being staged (GW-1). See the module docs.
#[derive(Debug)]
pub struct WriteStream {
    inner: ReadStream,
}

impl WriteStream {
    /// Prepare to write `partition` of the dataset `manifest` describes, staged as `txid`;
    /// where each block lands goes to `placed` (several writers may share one). Pieces must
    /// be whole blocks (a partition on block boundaries).
    pub fn open(
        client: Arc<Client>,
        manifest: Arc<Manifest>,
        txid: u64,
        partition: Partition,
        opts: ReadOptions,
        source: Arc<dyn BlockSource>,
        placed: PlacedLog,
    ) -> Result<WriteStream> {
        let mut inner = ReadStream::open(client, manifest, partition, opts)?;
        if let Some(p) = inner.engine.pieces().iter().find(|p| !p.is_whole_block(&inner.manifest.shape)) {
            return Err(ClientError::Invalid(format!(
                "a writer writes whole blocks; its partition cuts {} block {}",
                p.fragment, p.block
            )));
        }
        inner.start_writing(txid, source, placed);
        Ok(WriteStream { inner })
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

    pub fn report(&self) -> ReadReport {
        self.inner.report()
    }

    /// Stop: cancel what is still queued at servers.
    pub fn close(self) -> ReadReport {
        self.inner.close()
    }
}
