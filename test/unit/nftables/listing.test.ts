// A read-back compare (src/nftables/listing.ts listingIs) beside a full late-replies set: the held
// replies' elements are never compared — but for one that carries a timeout of its own, put there
// by someone else to stay (docs/writes.md, "Existing flows") — and 16 384 of them are cut out
// before any pass over the listing's text.
import t from 'tap';
import { compile } from '../../../src/compile.js';
import { parseConfigText } from '../../../src/config/index.js';
import { listingIs } from '../../../src/nftables/listing.js';
import { renderTable } from '../../../src/nftables/render.js';
import { compileOptions } from '../../helpers/compile-options.js';

const result = parseConfigText('nonMasqueradeCIDRs: [10.0.0.0/8]\n', 'case', {
  enableIPv6: false,
  nomasqAllReservedRanges: false,
});
if (!result.ok) throw result.error;
const [table] = compile(result.config, compileOptions(), 1, 'minx3e9s.001');

/** The table as nft lists it with `items` in late-replies, one per line of `elements = { … }`. */
function listed(items: readonly string[]): string {
  const text = renderTable(table!);
  return text.replace(
    /(set late-replies \{[^}]*?)(\n\t\})/,
    (_, head: string, tail: string) =>
      `${head}\n\t\telements = { ${items.join(',\n\t\t\t     ')} }${tail}`,
  );
}

const held = Array.from(
  { length: 16_384 },
  (_, i) => `10.9.${i >> 8}.${i & 255} . 53 . 10.244.1.2 . ${1024 + (i % 60000)} expires 2s`,
);

t.test('held replies are not compared; one planted with a timeout is', async (t) => {
  t.ok(listingIs(listed([]), table!), 'no held replies: the table');
  const full = listed(held);
  t.ok(full.length > 16_384 * 30, 'the listing holds them');
  t.ok(listingIs(full, table!), '16 384 held replies: still the table');
  const planted = [
    ...held.slice(0, 10),
    '10.9.0.1 . 53 . 10.244.1.2 . 1000 timeout 1h expires 59m',
  ];
  t.notOk(listingIs(listed(planted), table!), 'one planted to stay: not the table');
});
