// Creates Nodes in a real API server quickly (kubectl creates one at a time): run inside the
// control plane's namespace (spawnNodeInNetns) as
//   create-nodes.ts KUBECONFIG FIRST COUNT PAD_BYTES
// Node i (FIRST ≤ i < FIRST+COUNT) is `scale-i` with pod CIDR 10.(i>>8).(i&255).0/24 and an
// annotation of PAD_BYTES bytes; 16 requests at a time over the admin's client certificate.
import { readFileSync } from 'node:fs';
import https from 'node:https';
import { parse } from 'yaml';

const [kubeconfigPath, firstText, countText, padText] = process.argv.slice(2);
const config = parse(readFileSync(kubeconfigPath!, 'utf8')) as {
  clusters: Array<{ cluster: { server: string; 'certificate-authority-data': string } }>;
  users: Array<{ user: { 'client-certificate-data': string; 'client-key-data': string } }>;
};
const cluster = config.clusters[0]!.cluster;
const user = config.users[0]!.user;
const decode = (text: string) => Buffer.from(text, 'base64');
const agent = new https.Agent({
  keepAlive: true,
  maxSockets: 16,
  ca: decode(cluster['certificate-authority-data']),
  cert: decode(user['client-certificate-data']),
  key: decode(user['client-key-data']),
});
const server = new URL(cluster.server);
const first = Number(firstText);
const count = Number(countText);
const pad = 'x'.repeat(Number(padText));

function create(i: number): Promise<void> {
  const cidr = `10.${i >> 8}.${i & 255}.0/24`;
  const body = JSON.stringify({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: `scale-${i}`, annotations: { 'ipmasq.test/pad': pad } },
    spec: { podCIDR: cidr, podCIDRs: [cidr] },
  });
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: server.hostname,
        port: server.port,
        path: '/api/v1/nodes',
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          if (res.statusCode === 201 || res.statusCode === 409) resolve();
          else
            reject(new Error(`node ${i}: ${res.statusCode} ${Buffer.concat(chunks).toString()}`));
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

let next = first;
async function worker(): Promise<void> {
  while (next < first + count) {
    const i = next++;
    await create(i);
  }
}
await Promise.all(Array.from({ length: 16 }, worker));
agent.destroy();
process.stdout.write(`created ${count}\n`);
