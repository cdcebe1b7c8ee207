// A compile-only stand-in for libguestfs.org/libnbd (README.md one level up).
module libguestfs.org/libnbd

go 1.21
