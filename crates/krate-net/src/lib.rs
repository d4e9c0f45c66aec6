//! Service networking: pod network, service proxy on nftables, cluster DNS, network
//! policy. Arrives with the service networking issue.
