//! `api.DomainStatus`: what libvirt and the guest agent say about the running domain.
//!
//! The model for this part lives here (the XML model has no status): the launcher fills it from
//! libvirt's state and the guest agent, the handler reads it back.

use super::{GoJson, GoJsonError, Path, go_struct};
use serde_json::Value;

/// Declares a string enum with Go's constant values, `Unset` being Go's empty string.
macro_rules! go_string_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            /// Not set (Go's empty string).
            #[default]
            Unset,
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every value, `Unset` first.
            pub const ALL: &'static [$name] = &[$name::Unset, $($name::$variant,)*];

            /// The Go constant's text (`""` for `Unset`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $name::Unset => "",
                    $($name::$variant => $text,)*
                }
            }

            /// The value for a Go constant's text.
            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    "" => Some($name::Unset),
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl GoJson for $name {
            fn to_go(&self) -> Value {
                Value::String(self.as_str().to_string())
            }
            fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
                let s = String::from_go(v, at)?;
                $name::parse(&s).ok_or_else(|| at.invalid(format!("unknown {} {s:?}", stringify!($name))))
            }
        }
    };
}

go_string_enum!(
    /// The domain's life-cycle state (`api.LifeCycle`).
    LifeCycle {
        /// libvirt reports no state.
        NoState = "NoState",
        /// Running.
        Running = "Running",
        /// Blocked on a resource.
        Blocked = "Blocked",
        /// Paused.
        Paused = "Paused",
        /// Shutting down.
        ShuttingDown = "ShuttingDown",
        /// Shut off.
        Shutoff = "Shutoff",
        /// Crashed.
        Crashed = "Crashed",
        /// Suspended by guest power management.
        PmSuspended = "PMSuspended",
        /// The domain exists but its launcher cannot be reached.
        Unknown = "Unknown",
    }
);

go_string_enum!(
    /// Why the domain is in its state (`api.StateChangeReason`); Go reuses some texts across
    /// states (`User` for shutting down and paused), so each text appears once here.
    StateChangeReason {
        /// Unknown.
        Unknown = "Unknown",
        /// Caused by the user.
        User = "User",
        /// Shut down normally.
        Shutdown = "Shutdown",
        /// Destroyed.
        Destroyed = "Destroyed",
        /// Migrated away.
        Migrated = "Migrated",
        /// Crashed.
        Crashed = "Crashed",
        /// Guest panicked.
        Panicked = "Panicked",
        /// Saved.
        Saved = "Saved",
        /// Failed.
        Failed = "Failed",
        /// Restored from a snapshot.
        FromSnapshot = "FromSnapshot",
        /// The domain does not exist.
        NonExistent = "NonExistent",
        /// Paused for migration.
        Migration = "Migration",
        /// Paused for a save.
        Save = "Save",
        /// Paused for a dump.
        Dump = "Dump",
        /// Paused on an I/O error.
        IoError = "IOError",
        /// Paused by the watchdog.
        Watchdog = "Watchdog",
        /// Paused while shutting down.
        ShuttingDown = "ShuttingDown",
        /// Paused for a snapshot.
        Snapshot = "Snapshot",
        /// Paused while starting up.
        StartingUp = "StartingUp",
        /// Paused in post-copy migration.
        Postcopy = "Postcopy",
        /// Paused after a failed post-copy migration.
        PostcopyFailed = "PostcopyFailed",
    }
);

/// `api.DomainStatus`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainStatus {
    /// Life-cycle state.
    pub status: LifeCycle,
    /// Why.
    pub reason: StateChangeReason,
    /// Interfaces the guest agent reports.
    pub interfaces: Vec<InterfaceStatus>,
    /// Guest OS the agent reports.
    pub os_info: GuestOsInfo,
    /// File-system freeze state.
    pub fs_freeze_status: FsFreeze,
    /// Details of the last guest panic.
    pub guest_panic_info: Option<GuestPanicInfo>,
    /// Guest panics seen.
    pub panic_count: i64,
}

go_struct!(DomainStatus {
    "Status" => status,
    "Reason" => reason,
    "Interfaces" => interfaces,
    "OSInfo" => os_info,
    "FSFreezeStatus" => fs_freeze_status,
    "GuestPanicInfo" => guest_panic_info,
    "PanicCount" => panic_count,
});

/// `api.InterfaceStatus`: one guest NIC as the agent sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceStatus {
    /// MAC address.
    pub mac: String,
    /// First IP address.
    pub ip: String,
    /// All IP addresses.
    pub ips: Vec<String>,
    /// Name inside the guest.
    pub interface_name: String,
}

go_struct!(InterfaceStatus {
    "Mac" => mac,
    "Ip" => ip,
    "IPs" => ips,
    "InterfaceName" => interface_name,
});

/// `api.GuestOSInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestOsInfo {
    /// OS name.
    pub name: String,
    /// Kernel release.
    pub kernel_release: String,
    /// OS version.
    pub version: String,
    /// Human-readable name.
    pub pretty_name: String,
    /// Version id.
    pub version_id: String,
    /// Kernel version.
    pub kernel_version: String,
    /// Machine (architecture).
    pub machine: String,
    /// OS id.
    pub id: String,
}

go_struct!(GuestOsInfo {
    "Name" => name,
    "KernelRelease" => kernel_release,
    "Version" => version,
    "PrettyName" => pretty_name,
    "VersionId" => version_id,
    "KernelVersion" => kernel_version,
    "Machine" => machine,
    "Id" => id,
});

/// `api.FSFreeze`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsFreeze {
    /// `frozen`, `thawed` or empty.
    pub status: String,
}

go_struct!(FsFreeze {
    "Status" => status,
});

/// `api.GuestPanicInfo`: QEMU's guest-panicked event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestPanicInfo {
    /// Panic kind (`hyper-v`, `s390`, ...).
    pub kind: String,
    /// Windows bugcheck code.
    pub arg1: u64,
    /// Bugcheck parameter.
    pub arg2: u64,
    /// Bugcheck parameter.
    pub arg3: u64,
    /// Bugcheck parameter.
    pub arg4: u64,
    /// Bugcheck parameter.
    pub arg5: u64,
}

go_struct!(GuestPanicInfo {
    "Type" => kind,
    "Arg1" => arg1,
    "Arg2" => arg2,
    "Arg3" => arg3,
    "Arg4" => arg4,
    "Arg5" => arg5,
});
