//! `<disk>` and its parts (`api.Disk`, `api.DiskSource`, ...).

use super::go_struct;
use crate::domain::{
    BackingStore, BlockIo, DataStore, Disk, DiskAuth, DiskDriver, DiskIoThread, DiskIoThreads,
    DiskSecret, DiskSource, DiskSourceHost, DiskTarget, FormatType, Reservations, SliceType,
    Slices, SourceReservations,
};

go_struct!(Disk {
    "Device" => device,
    "Snapshot" => snapshot as omit,
    "Type" => kind,
    "Source" => source,
    "Target" => target,
    "Serial" => serial as omit,
    "Driver" => driver,
    "ReadOnly" => readonly,
    "Auth" => auth,
    "Alias" => alias,
    "BackingStore" => backing_store,
    "BootOrder" => boot,
    "Address" => address,
    "Model" => model as omit,
    "BlockIO" => blockio,
    "FilesystemOverhead" => filesystem_overhead,
    "Capacity" => capacity,
    "Shareable" => shareable,
});

go_struct!(DiskSource {
    "Dev" => dev as omit,
    "File" => file as omit,
    "StartupPolicy" => startup_policy as omit,
    "Protocol" => protocol as omit,
    "Name" => name as omit,
    "Host" => host,
    "Reservations" => reservations,
    "Slices" => slices,
    "DataStore" => data_store,
});

go_struct!(DiskSourceHost {
    "Name" => name,
    "Port" => port as omit,
});

go_struct!(Reservations {
    "Managed" => managed as omit,
    "Migration" => migration as omit,
    "SourceReservations" => source,
});

go_struct!(SourceReservations {
    "Type" => kind,
    "Path" => path as omit,
    "Mode" => mode as omit,
});

go_struct!(Slices {
    "Slice" => slice,
});

go_struct!(SliceType {
    "Type" => kind,
    "Offset" => offset,
    "Size" => size,
});

go_struct!(DataStore {
    "Type" => kind as omit,
    "Format" => format,
    "Source" => source,
});

// Go's `DataStoreFormat` and `BackingStoreFormat`, one type in the model.
go_struct!(FormatType {
    "Type" => kind,
});

go_struct!(DiskTarget {
    "Bus" => bus as omit,
    "Device" => dev as omit,
    "Tray" => tray as omit,
});

go_struct!(DiskDriver {
    "Cache" => cache as omit,
    "ErrorPolicy" => error_policy as omit,
    "IO" => io as omit,
    "Name" => name,
    "Type" => kind,
    "IOThread" => iothread,
    "IOThreads" => iothreads,
    "Queues" => queues,
    "Discard" => discard as omit,
    "IOMMU" => iommu as omit,
});

go_struct!(DiskIoThreads {
    "IOThread" => iothread,
});

go_struct!(DiskIoThread {
    "Id" => id,
});

go_struct!(DiskAuth {
    "Username" => username,
    "Secret" => secret,
});

go_struct!(DiskSecret {
    "Type" => kind,
    "Usage" => usage as omit,
    "UUID" => uuid as omit,
});

go_struct!(BackingStore {
    "Type" => kind as omit,
    "Format" => format,
    "Source" => source,
});

go_struct!(BlockIo {
    "LogicalBlockSize" => logical_block_size as omit,
    "PhysicalBlockSize" => physical_block_size as omit,
    "DiscardGranularity" => discard_granularity,
});
