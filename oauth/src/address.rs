//! The address rule's classes of IP addresses (an IPv6 address that embeds an IPv4 one has
//! the class of that one).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The class of an IP address, as the address rule sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AddressClass {
    Public,
    Loopback,
    /// 10/8, 172.16/12, 192.168/16, fc00::/7.
    Private,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// 100.64/10 (carrier-grade NAT).
    Shared,
    /// 0.0.0.0, `::`.
    Unspecified,
    Multicast,
    /// Everything else that is not a public unicast address (0/8, 240/4, broadcast,
    /// benchmarking, documentation, Teredo, ...).
    Reserved,
}

impl AddressClass {
    pub fn of(ip: IpAddr) -> AddressClass {
        match ip {
            IpAddr::V4(v4) => Self::of_v4(v4),
            IpAddr::V6(v6) => match embedded_v4(v6) {
                Some(v4) => Self::of_v4(v4),
                None => Self::of_v6(v6),
            },
        }
    }

    fn of_v4(ip: Ipv4Addr) -> AddressClass {
        let [a, b, c, _] = ip.octets();
        if ip.is_unspecified() {
            AddressClass::Unspecified
        } else if ip.is_loopback() {
            AddressClass::Loopback
        } else if ip.is_private() {
            AddressClass::Private
        } else if ip.is_link_local() {
            AddressClass::LinkLocal
        } else if a == 100 && (64..128).contains(&b) {
            AddressClass::Shared
        } else if ip.is_multicast() {
            AddressClass::Multicast
        } else if a == 0
            || a >= 240
            || (a == 198 && (b & 0xfe) == 18)
            || (a == 192 && b == 0 && c == 0)
            || ip.is_documentation()
        {
            AddressClass::Reserved
        } else {
            AddressClass::Public
        }
    }

    fn of_v6(ip: Ipv6Addr) -> AddressClass {
        let s = ip.segments();
        if ip.is_unspecified() {
            AddressClass::Unspecified
        } else if ip.is_loopback() {
            AddressClass::Loopback
        } else if (s[0] & 0xfe00) == 0xfc00 {
            AddressClass::Private
        } else if (s[0] & 0xffc0) == 0xfe80 {
            AddressClass::LinkLocal
        } else if ip.is_multicast() {
            AddressClass::Multicast
        } else if (s[0] & 0xe000) != 0x2000
            || (s[0] == 0x2001 && s[1] < 0x0200)
            || (s[0] == 0x2001 && s[1] == 0x0db8)
        {
            // Outside global unicast 2000::/3; Teredo and the IETF block 2001::/23;
            // documentation.
            AddressClass::Reserved
        } else {
            AddressClass::Public
        }
    }

    fn describe(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private-network",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Shared => "shared (carrier-grade NAT)",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Multicast => "multicast",
            AddressClass::Reserved => "reserved",
        }
    }
}

impl std::fmt::Display for AddressClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible, NAT64
/// (`64:ff9b::/96`) or 6to4 (`2002::/16`) IPv6 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] | [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(low),
        [0, 0, 0, 0, 0, 0, ..] if !ip.is_loopback() && !ip.is_unspecified() => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))),
        _ => None,
    }
}

/// An address from its text, for tests.
#[cfg(test)]
pub(crate) fn ip(text: &str) -> IpAddr {
    text.parse()
        .unwrap_or_else(|e| panic!("{text} is not an address: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_classes() {
        use AddressClass::*;
        for (address, class) in [
            ("93.184.216.34", Public),
            ("2606:2800:220:1::1", Public),
            ("127.0.0.1", Loopback),
            ("127.8.9.10", Loopback),
            ("::1", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("0.0.0.0", Unspecified),
            ("::", Unspecified),
            ("10.0.0.1", Private),
            ("10.255.255.255", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("fc00::1", Private),
            ("fd12:3456::1", Private),
            ("::ffff:10.0.0.1", Private),
            ("64:ff9b::a00:1", Private),
            ("2002:a00:1::1", Private),
            ("169.254.169.254", LinkLocal),
            ("fe80::1", LinkLocal),
            ("::ffff:169.254.169.254", LinkLocal),
            ("100.64.0.1", Shared),
            ("100.127.255.255", Shared),
            ("224.0.0.1", Multicast),
            ("ff02::1", Multicast),
            ("255.255.255.255", Reserved),
            ("0.1.2.3", Reserved),
            ("198.18.0.1", Reserved),
            ("2001:db8::1", Reserved),
            ("2001::1", Reserved),
        ] {
            assert_eq!(AddressClass::of(ip(address)), class, "{address}");
        }
        assert_eq!(AddressClass::of(ip("100.63.255.255")), Public);
        assert_eq!(AddressClass::of(ip("172.32.0.1")), Public);
    }
}
