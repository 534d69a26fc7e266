// Creates or changes Nodes in a real API server quickly (kubectl does one at a time), inside the
// control plane's namespace, 16 requests at a time over the admin's client certificate:
//   create-nodes.ts KUBECONFIG create FIRST COUNT PAD_BYTES
//     Node i (FIRST ≤ i < FIRST+COUNT) is `scale-i` with pod CIDR 10.(i>>8).(i&255).0/24 and an
//     annotation of PAD_BYTES bytes;
//   create-nodes.ts KUBECONFIG label FIRST COUNT VALUE
//     the label ipmasq.test/touched=VALUE patched onto each (one watch event per Node).
import { readFileSync } from 'node:fs';
import https from 'node:https';
import { parse } from 'yaml';

const [kubeconfigPath, mode, firstText, countText, extra] = process.argv.slice(2);
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
const pad = mode === 'create' ? 'x'.repeat(Number(extra)) : '';

function create(i: number): Promise<void> {
  const cidr = `10.${i >> 8}.${i & 255}.0/24`;
  const label = mode === 'label';
  const body = JSON.stringify(
    label
      ? { metadata: { labels: { 'ipmasq.test/touched': extra } } }
      : {
          apiVersion: 'v1',
          kind: 'Node',
          metadata: { name: `scale-${i}`, annotations: { 'ipmasq.test/pad': pad } },
          spec: { podCIDR: cidr, podCIDRs: [cidr] },
        },
  );
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: server.hostname,
        port: server.port,
        path: label ? `/api/v1/nodes/scale-${i}` : '/api/v1/nodes',
        method: label ? 'PATCH' : 'POST',
        agent,
        headers: {
          'content-type': label ? 'application/merge-patch+json' : 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          if (res.statusCode === 200 || res.statusCode === 201 || res.statusCode === 409) resolve();
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
process.stdout.write(`${mode}: ${count} Nodes\n`);
