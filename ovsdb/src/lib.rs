//! RFC 7047 (OVSDB) client: JSON-RPC 1.0 framing, a sans-IO session and typed Open_vSwitch helpers.
