// Runs a FakeApiServer in the namespace it is started in (the agent's), listening on 127.0.0.1:PORT,
// and takes calls from the test over a Unix socket (not network-namespaced): POST /call
// {method, args} → {result} or {error}. Prints "ready" once both listen.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { FakeApiServer } from './fake-apiserver.js';

const [port, control, optionsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson ?? '{}') as {
  token?: string;
  bookmarkMs?: number;
  tls?: { certFile: string; keyFile: string };
};
const fake = new FakeApiServer({
  ...(options.token ? { token: options.token } : {}),
  ...(options.bookmarkMs ? { bookmarkMs: options.bookmarkMs } : {}),
  ...(options.tls
    ? {
        tls: {
          cert: readFileSync(options.tls.certFile, 'utf8'),
          key: readFileSync(options.tls.keyFile, 'utf8'),
        },
      }
    : {}),
});
await fake.listen(Number(port), '127.0.0.1');

const callable = fake as unknown as Record<string, (...args: unknown[]) => unknown>;
const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    void (async () => {
      const { method, args } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        method: string;
        args: unknown[];
      };
      try {
        let result: unknown;
        if (method === 'counts') result = Object.fromEntries(fake.counts);
        else result = await callable[method]!.apply(fake, args);
        res.end(JSON.stringify({ result: result ?? null }));
      } catch (err) {
        res.end(JSON.stringify({ error: String(err) }));
      }
    })();
  });
});
server.listen(control, () => process.stdout.write('ready\n'));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
