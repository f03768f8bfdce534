'use strict';
// Bitcoin regtest full node for local tests, run by services/bitcoin/start.sh.
// Chain, mempool and wallet live in memory (no leveldown), so each start is a
// fresh chain at height 0.
//
//   node JSON-RPC:   http://confirmd:confirmd@127.0.0.1:$BITCOIN_RPC_PORT (18443)
//   wallet JSON-RPC: http://confirmd:confirmd@127.0.0.1:$BITCOIN_WALLET_RPC_PORT (18445)
//   ZMQ hashblock:   tcp://127.0.0.1:$BITCOIN_ZMQ_PORT (28332)
//
// Authentication is HTTP basic with password = api key ("confirmd"); the user
// name is not checked.

const bcoin = require('bcoin');
const zmq = require('zeromq');

// Some RPC handlers format addresses with the default network; make it regtest
// so they print rb1... / m... / n... / 2... addresses, not mainnet ones.
bcoin.set('regtest');

// bcoin's regtest activates segwit by BIP9 signalling over 144-block windows
// (only after ~432 blocks); shrink the window so it is active from block 2 on,
// as on other regtest chains, and bech32 wallet sends are accepted early.
const segwit = bcoin.Network.get('regtest').deployments.segwit;
segwit.window = 1;
segwit.threshold = 1;

const env = (name, fallback) => process.env[name] || fallback;

const host = '127.0.0.1';
const apiKey = env('BITCOIN_API_KEY', 'confirmd');

const node = new bcoin.FullNode({
  network: 'regtest',
  memory: true,
  // Workers would spawn extra processes; not worth it on a test chain.
  workers: false,
  // No peers: the node only serves RPC on loopback.
  listen: false,
  indexTX: true,
  indexAddress: true,
  logLevel: env('BITCOIN_LOG_LEVEL', 'warning'),
  logConsole: true,
  httpHost: host,
  httpPort: Number(env('BITCOIN_RPC_PORT', '18443')),
  apiKey,
  // The wallet plugin reads the "wallet-" prefixed options.
  walletHttpHost: host,
  walletHttpPort: Number(env('BITCOIN_WALLET_RPC_PORT', '18445')),
  walletApiKey: apiKey,
  // Segwit wallet, so getnewaddress hands out bech32 (rb1...) addresses.
  walletWitness: true,
  plugins: [bcoin.wallet.plugin]
});

// Bitcoin Core takes getblock's verbosity as 0|1|2 and names a standard
// output's address scriptPubKey.address; bcoin takes (verbose, details)
// booleans and only lists scriptPubKey.addresses. Accept and emit both, so a
// client written against Core works here unchanged.
const rpc = node.rpc;
const getBlock = rpc.calls.getblock;
rpc.calls.getblock = function (args, help) {
  const mapped = args.length === 2 && args[1] === 2 ? [args[0], true, true] : args;
  return getBlock.call(this, mapped, help);
};
const scriptToJSON = rpc.scriptToJSON;
rpc.scriptToJSON = function (script, hex) {
  const json = scriptToJSON.call(this, script, hex);
  if (json.addresses.length === 1)
    json.address = json.addresses[0];
  return json;
};

// Bitcoin Core's zmqpubhashblock, so that a client of it works here unchanged:
// a multipart message [topic "hashblock", the 32-byte block hash in RPC byte
// order, a 4-byte little-endian sequence number counting from 0] each time a
// block joins the main chain.
const hashblock = new zmq.Publisher();
let hashblockSequence = 0;
let hashblockSent = Promise.resolve();
node.chain.on('connect', (entry) => {
  const sequence = Buffer.alloc(4);
  sequence.writeUInt32LE(hashblockSequence);
  hashblockSequence = (hashblockSequence + 1) >>> 0;
  // entry.rhash() is the hash as RPC shows it (entry.hash is in internal order).
  const message = ['hashblock', Buffer.from(entry.rhash(), 'hex'), sequence];
  // One send at a time, in order; a send that fails must not stop the chain.
  hashblockSent = hashblockSent
    .then(() => hashblock.send(message))
    .catch((err) => console.error(err));
});

const shutdown = () => {
  hashblock.close();
  node.close().then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    }
  );
};

process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

(async () => {
  // Bound before the node answers RPC, so a node that answers also publishes.
  await hashblock.bind(`tcp://${host}:${Number(env('BITCOIN_ZMQ_PORT', '28332'))}`);
  await node.ensure();
  await node.open();
  console.log(`regtest node ready on ${host}:${node.http.options.port}`);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
