// Command vifcache prints, on stdout, a bridge-binding DHCP cache entry exactly as
// KubeVirt v1.9.0's virt-handler writes /var/run/kubevirt-private/vif-cache-<iface>.json:
// a struct with KubeVirt's DHCPConfig field names and types, marshalled by encoding/json.
// kvrs's launcher parses this output in its tests (written for kvrs, not taken from KubeVirt).
package main

import (
	"encoding/json"
	"net"
	"os"

	"github.com/vishvananda/netlink"
)

// dhcpConfig mirrors the field names and Go types of KubeVirt's cache.DHCPConfig.
type dhcpConfig struct {
	Name                string
	IP                  netlink.Addr
	IPv6                netlink.Addr
	MAC                 net.HardwareAddr
	AdvertisingIPAddr   net.IP
	AdvertisingIPv6Addr net.IP
	Routes              *[]netlink.Route
	Mtu                 uint16
	IPAMDisabled        bool
	Gateway             net.IP
	Subdomain           string
}

func main() {
	addr, err := netlink.ParseAddr("10.244.1.7/24")
	if err != nil {
		panic(err)
	}
	mac, _ := net.ParseMAC("0a:58:0a:f4:01:07")
	_, dst, _ := net.ParseCIDR("10.96.0.0/12")
	routes := []netlink.Route{
		{Gw: net.ParseIP("10.244.1.1")},
		{Dst: dst, Gw: net.ParseIP("10.244.1.254")},
		{Dst: &net.IPNet{IP: net.ParseIP("10.244.1.0").To4(), Mask: net.CIDRMask(24, 32)}, Src: net.ParseIP("10.244.1.7"), Scope: netlink.SCOPE_LINK},
	}
	cfg := dhcpConfig{
		Name:    "eth0",
		IP:      *addr,
		MAC:     mac,
		Routes:  &routes,
		Mtu:     1400,
		Gateway: net.ParseIP("10.244.1.1"),
	}
	if err := json.NewEncoder(os.Stdout).Encode(cfg); err != nil {
		panic(err)
	}
}
