//! Rust errors as Python exceptions: one small hierarchy under `ganges.GangesError`, so a
//! program catches what it can act on (an unknown dataset, an unreachable cluster, a bad
//! checksum) and lets the rest propagate.

use ganges_client::ClientError;
use ganges_core::route::RouteError;
use ganges_proto::msg::ErrorCode;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

pyo3::create_exception!(_ganges, GangesError, PyException, "Every error ganges raises.");
pyo3::create_exception!(
    _ganges,
    ClusterUnreachable,
    GangesError,
    "A server could not be reached, went down, or did not answer in time."
);
pyo3::create_exception!(
    _ganges,
    AuthenticationError,
    GangesError,
    "A server refused the connection: a wrong or missing cluster secret, or TLS required."
);
pyo3::create_exception!(_ganges, DatasetNotFound, GangesError, "No dataset of that name in the cluster.");
pyo3::create_exception!(_ganges, DatasetExists, GangesError, "A dataset of that name exists already.");
pyo3::create_exception!(
    _ganges,
    ChecksumError,
    GangesError,
    "Stored or delivered bytes failed their checksum or the dataset's digest."
);
pyo3::create_exception!(_ganges, DiskFull, GangesError, "A server's disk is full; nothing of the write is visible.");
pyo3::create_exception!(
    _ganges,
    InvalidArgument,
    GangesError,
    "An argument ganges cannot accept; the message says why."
);
pyo3::create_exception!(_ganges, ClusterFileError, GangesError, "The cluster file is missing or malformed.");
pyo3::create_exception!(_ganges, LocalClusterError, GangesError, "A local cluster could not start or stop.");
pyo3::create_exception!(_ganges, ServerError, GangesError, "A server failed the request (its message says how).");
pyo3::create_exception!(
    _ganges,
    ProtocolError,
    GangesError,
    "A server answered something the protocol does not allow."
);
pyo3::create_exception!(_ganges, LocalIOError, GangesError, "A local file could not be read or written.");

/// The exception a client error becomes; its message is the error's own.
pub fn client(e: ClientError) -> PyErr {
    let msg = e.to_string();
    match &e {
        ClientError::NoServers { .. }
        | ClientError::Connect { .. }
        | ClientError::NodeDown { .. }
        | ClientError::Timeout { .. }
        | ClientError::CommitInDoubt { .. } => ClusterUnreachable::new_err(msg),
        ClientError::Refused { err, .. } => match err.code {
            ErrorCode::AuthRequired | ErrorCode::AuthFailed | ErrorCode::AuthUnsupported => {
                AuthenticationError::new_err(msg)
            }
            _ => ClusterUnreachable::new_err(msg),
        },
        ClientError::UnknownDataset(_) => DatasetNotFound::new_err(msg),
        ClientError::Server { err, .. } => match err.code {
            ErrorCode::UnknownDataset => DatasetNotFound::new_err(msg),
            ErrorCode::DatasetExists => DatasetExists::new_err(msg),
            ErrorCode::Corrupt => ChecksumError::new_err(msg),
            ErrorCode::DiskFull => DiskFull::new_err(msg),
            ErrorCode::BadRequest | ErrorCode::OutOfRange => InvalidArgument::new_err(msg),
            ErrorCode::AuthRequired | ErrorCode::AuthFailed | ErrorCode::AuthUnsupported => {
                AuthenticationError::new_err(msg)
            }
            _ => ServerError::new_err(msg),
        },
        ClientError::DigestMismatch { .. } => ChecksumError::new_err(msg),
        ClientError::Protocol { .. } => ProtocolError::new_err(msg),
        ClientError::Route(RouteError::NoLiveCopy { .. }) => ClusterUnreachable::new_err(msg),
        ClientError::Route(RouteError::Corrupt { .. }) => ChecksumError::new_err(msg),
        ClientError::Route(_) | ClientError::Shape(_) | ClientError::Layout(_) | ClientError::Invalid(_) => {
            InvalidArgument::new_err(msg)
        }
        ClientError::Io { .. } => LocalIOError::new_err(msg),
        ClientError::Cluster { .. } => ClusterFileError::new_err(msg),
    }
}

/// A local cluster's failure to start or stop.
pub fn harness(e: ganges_harness::HarnessError) -> PyErr {
    LocalClusterError::new_err(e.to_string())
}

/// An argument error with the message given.
pub fn invalid(msg: impl Into<String>) -> PyErr {
    InvalidArgument::new_err(msg.into())
}

/// Adds every exception to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("GangesError", py.get_type::<GangesError>())?;
    m.add("ClusterUnreachable", py.get_type::<ClusterUnreachable>())?;
    m.add("AuthenticationError", py.get_type::<AuthenticationError>())?;
    m.add("DatasetNotFound", py.get_type::<DatasetNotFound>())?;
    m.add("DatasetExists", py.get_type::<DatasetExists>())?;
    m.add("ChecksumError", py.get_type::<ChecksumError>())?;
    m.add("DiskFull", py.get_type::<DiskFull>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("ClusterFileError", py.get_type::<ClusterFileError>())?;
    m.add("LocalClusterError", py.get_type::<LocalClusterError>())?;
    m.add("ServerError", py.get_type::<ServerError>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add("LocalIOError", py.get_type::<LocalIOError>())?;
    Ok(())
}
