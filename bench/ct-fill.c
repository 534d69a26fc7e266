// Fills the calling namespace's conntrack table with COUNT source-translated UDP entries, for the
// NAT sample's bench (bench/nat-sample.ts): pod sources 10.244.0.0/16 to destinations in
// 198.18.0.0/15 port 53, each translated to 192.0.2.1 and a port of its own per destination (64 512
// per destination address, so every 64 512 entries share one (translated address, destination,
// port)). Built by the bench with `cc -O2 … -lnetfilter_conntrack`; not part of the agent.
#include <arpa/inet.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: ct-fill COUNT\n");
    return 2;
  }
  long count = atol(argv[1]);
  struct nfct_handle *h = nfct_open(CONNTRACK, 0);
  if (!h) {
    perror("nfct_open");
    return 1;
  }
  struct nf_conntrack *ct = nfct_new();
  long made = 0;
  for (long i = 0; i < count; i++) {
    uint32_t source = (10u << 24) | (244u << 16) | (uint32_t)(i % 65536);
    uint32_t destination = (198u << 24) | (18u << 16) | (uint32_t)(i / 64512 + 1);
    nfct_set_attr_u8(ct, ATTR_L3PROTO, AF_INET);
    nfct_set_attr_u32(ct, ATTR_IPV4_SRC, htonl(source));
    nfct_set_attr_u32(ct, ATTR_IPV4_DST, htonl(destination));
    nfct_set_attr_u8(ct, ATTR_L4PROTO, IPPROTO_UDP);
    nfct_set_attr_u16(ct, ATTR_PORT_SRC, htons((uint16_t)(10000 + (i / 65536) % 50000)));
    nfct_set_attr_u16(ct, ATTR_PORT_DST, htons(53));
    nfct_set_attr_u32(ct, ATTR_SNAT_IPV4, htonl((192u << 24) | (2u << 8) | 1u));
    nfct_set_attr_u16(ct, ATTR_SNAT_PORT, htons((uint16_t)(1024 + i % 64512)));
    nfct_set_attr_u32(ct, ATTR_TIMEOUT, 3600);
    nfct_setobjopt(ct, NFCT_SOPT_SETUP_REPLY);
    if (nfct_query(h, NFCT_Q_CREATE, ct) == 0)
      made++;
    else if (made == 0 && i == 0)
      perror("create");
  }
  nfct_destroy(ct);
  nfct_close(h);
  printf("%ld\n", made);
  return made == count ? 0 : 1;
}
