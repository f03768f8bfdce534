/**
 * The checkout page's HTML: one self-contained document (inline style and script, the QR
 * code as inline SVG rendered on the server by `qrcode`), readable at phone width. Without
 * JavaScript everything static works (amount, address, QR, wallet link, expiry time) and the
 * page reloads itself every 20 s; with it, the state and the countdown update in place and
 * the copy buttons appear. An underpaid payment asks for its exact remainder (amount, QR
 * code, wallet link); a paid or expired one asks for nothing: no QR code, no wallet link, no
 * copy buttons. A template engine would add a dependency for a handful of interpolations;
 * every one of them goes through `escape`.
 */
import { createHash } from "node:crypto"
import { chains } from "../Domain/Chain.ts"
import { formatSmallest } from "../Domain/Money.ts"
import { type CheckoutView, stateText } from "./Checkout.ts"

const escape = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" })[c]!)

const chainLabel = (chain: string) => chain === "bnb" ? "BNB Smart Chain" : chain === "zksync" ? "zkSync Era" : chain[0]!.toUpperCase() + chain.slice(1)

const style = `
*{box-sizing:border-box}
body{margin:0;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#f4f5f7;color:#1b1f24}
main{max-width:28rem;margin:0 auto;padding:1rem}
.card{background:#fff;border-radius:12px;padding:1.25rem;box-shadow:0 1px 3px rgba(0,0,0,.12);container-type:inline-size}
h1{font-size:1.15rem;margin:0 0 .25rem}
.sub{color:#57606a;margin:0 0 1rem;font-size:.9rem}
.amount{font:650 1.6rem/1.45 ui-monospace,SFMono-Regular,Menlo,monospace;white-space:nowrap;overflow-x:auto;margin:0}
.received{color:#57606a;margin:0 0 .25rem;font-size:.9rem}
.usd{color:#57606a;margin:0 0 1rem}
.qr{display:block;width:100%;max-width:16rem;margin:0 auto 1rem}
.qr svg{display:block;width:100%;height:auto}
.field{margin:0 0 .9rem}
.field .label{display:block;font-size:.8rem;color:#57606a;text-transform:uppercase;letter-spacing:.03em}
.value{display:flex;gap:.5rem;align-items:flex-start}
code{flex:1;font:.95rem/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all;background:#f4f5f7;padding:.35rem .5rem;border-radius:6px}
button{font:inherit;font-size:.85rem;padding:.35rem .7rem;border:1px solid #d0d7de;border-radius:6px;background:#f6f8fa;cursor:pointer}
.no-js button{display:none}
a.wallet{display:block;text-align:center;padding:.7rem;border-radius:8px;background:#0b5cad;color:#fff;text-decoration:none;font-weight:600;margin:0 0 1rem}
.state{padding:.75rem;border-radius:8px;font-weight:600;margin:0 0 .75rem;background:#fff8c5}
.state[data-state=seen]{background:#ddf4ff}
.state[data-state=underpaid]{background:#fff1e5}
.state[data-state=paid]{background:#dafbe1}
.state[data-state=expired]{background:#ffebe9}
.expiry{color:#57606a;font-size:.9rem;margin:0}
.tx{font-size:.8rem;color:#57606a;word-break:break-all}
footer{text-align:center;color:#8c959f;font-size:.8rem;margin-top:1rem}
`

/** What the page says instead of asking for a payment, once it asks for none (`asksForPayment`). */
const settledAsks = {
  seen: "Your payment was seen on the chain: nothing more to send.",
  paid: "Paid in full: nothing more to send.",
  expired: "This payment expired: do not send anything to this address."
} as const

/** Polls the state, runs the countdown and the copy buttons; written without outside code. */
const script = `(function(){
document.documentElement.className="js";
var page=document.getElementById("checkout"),stateEl=document.getElementById("state"),countEl=document.getElementById("countdown"),txEl=document.getElementById("tx");
var expires=Date.parse(page.getAttribute("data-expires")),statePath=page.getAttribute("data-state-path");
var asks=${JSON.stringify(settledAsks)};
function settled(state){["qr","wallet"].forEach(function(id){var e=document.getElementById(id);if(e)e.remove();});
document.querySelectorAll("button[data-copy]").forEach(function(b){b.remove();});document.getElementById("ask").textContent=asks[state];}
function show(s){var asking=s.state==="waiting"||s.state==="underpaid";
if(asking&&(s.remainder!==page.getAttribute("data-remainder")||!document.getElementById("qr"))){location.reload();return;}
stateEl.setAttribute("data-state",s.state);
if(s.label)stateEl.textContent=s.label;
if(s.tx_hash){txEl.textContent="Transaction "+s.tx_hash;}if(!asking)settled(s.state);tick();}
function final(){var s=stateEl.getAttribute("data-state");return s==="paid"||s==="expired";}
function tick(){var left=Math.max(0,Math.floor((expires-Date.now())/1000));
var st=stateEl.getAttribute("data-state");if(st==="paid"||st==="seen"){countEl.textContent="";return;}
var m=Math.floor(left/60),s=left%60;countEl.textContent=left>0?"Expires in "+m+":"+(s<10?"0":"")+s:"Expired";}
function poll(){if(final())return;fetch(statePath,{cache:"no-store"}).then(function(r){return r.ok?r.json():null}).then(function(s){if(s)show(s)}).catch(function(){}).then(function(){if(!final())setTimeout(poll,2000)});}
document.querySelectorAll("button[data-copy]").forEach(function(b){b.addEventListener("click",function(){
var text=b.getAttribute("data-copy");var done=function(){b.textContent="Copied";setTimeout(function(){b.textContent="Copy"},1500)};
if(navigator.clipboard){navigator.clipboard.writeText(text).then(done,function(){})}});});
tick();setInterval(tick,1000);setTimeout(poll,2000);
})();`

const scriptHash = createHash("sha256").update(script).digest("base64")

/** Headers of every checkout response: the URL is a capability, so no referrer, no cache, no index. */
export const pageHeaders = {
  "content-security-policy": `default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-${scriptHash}'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
  "x-robots-tag": "noindex",
  "x-content-type-options": "nosniff"
} as const

const document = (title: string, body: string, live: boolean) => `<!doctype html>
<html lang="en" class="no-js"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${escape(title)}</title>
${live ? `<noscript><meta http-equiv="refresh" content="20"></noscript>` : ""}
<style>${style}</style></head>
<body><main>${body}<footer>Confirmed on-chain by confirmd. Nothing to sign on this page.</footer></main>
${live ? `<script>${script}</script>` : ""}</body></html>`

const copyable = (id: string, label: string, value: string, button: boolean) => `
<div class="field"><span class="label" id="${id}-label">${label}</span>
<div class="value"><code id="${id}" aria-labelledby="${id}-label">${escape(value)}</code>${
  button ? `<button type="button" data-copy="${escape(value)}" aria-label="Copy ${label}">Copy</button>` : ""
}</div></div>`

/**
 * The amount's font size: at most 1.6rem, and small enough that the whole text fits the
 * card's width on one line (a monospace character is about 0.6em wide), so that an amount of
 * 18 decimals never wraps mid-number on a phone.
 */
const amountFontSize = (text: string) => `min(1.6rem, calc(100cqi / ${(text.length * 0.62).toFixed(2)}))`

/** The request to pay: the QR code and wallet link of `uri`; absent (null) once nothing is to be paid. */
export interface PaymentRequest {
  readonly uri: string
  readonly qrSvg: string
}

export const checkoutPage = (view: CheckoutView, request: PaymentRequest | null, statePath: string): string => {
  const amount = formatSmallest(view.amountSmallest, view.coin.decimals)
  const amountText = `${amount} ${view.coin.symbol}`
  const network = chainLabel(view.chain)
  const live = view.state === "waiting" || view.state === "underpaid" || view.state === "seen"
  const what = view.kind === "payment" ? "Payment" : "Donation"
  const expires = view.expiresAt.toISOString()
  const chainId = chains[view.chain].chainId
  const where = `${escape(view.coin.symbol)} on ${escape(network)}${chainId === null ? "" : ` (chain id ${chainId})`}`
  const ask = view.state === "underpaid"
    ? `Send exactly the rest, this amount of ${where}, in one transfer.`
    : view.state === "waiting"
    ? `Send exactly this amount of ${where}, in one transfer.`
    : escape(settledAsks[view.state])
  const received = view.state === "underpaid"
    ? `<p class="received" id="received">Received ${escape(formatSmallest(view.receivedSmallest, view.coin.decimals))} of ${
      escape(formatSmallest(view.totalSmallest, view.coin.decimals))
    } ${escape(view.coin.symbol)} so far; the rest:</p>`
    : ""
  const body = `
<div class="card" id="checkout" data-expires="${expires}" data-state-path="${escape(statePath)}" data-remainder="${view.amountSmallest}">
<h1>${what} of ${escape(view.usdAmount)} USD</h1>
<p class="sub" id="ask">${ask}</p>
${received}<p class="amount" id="amount" style="font-size:${amountFontSize(amountText)}">${escape(amountText)}</p>
<p class="usd">${escape(view.usdAmount)} USD</p>
<div class="state" id="state" data-state="${view.state}" role="status" aria-live="polite">${escape(stateText(view))}</div>
<p class="expiry"><span id="countdown">${view.state === "paid" || view.state === "seen" ? "" : `Expires at ${escape(expires.replace("T", " ").slice(0, 16))} UTC`}</span></p>
<p class="tx" id="tx">${view.txHash === null ? "" : `Transaction ${escape(view.txHash)}`}</p>
${
    request === null ? "" : `<div class="qr" id="qr" role="img" aria-label="QR code of the payment request">${request.qrSvg}</div>
<a class="wallet" id="wallet" href="${escape(request.uri)}">Open in wallet</a>`
  }
${copyable("address", "Address", view.address, request !== null)}
${copyable("amount-value", `Amount (${escape(view.coin.symbol)})`, amount, request !== null)}
${
    view.coin.contract === null
      ? ""
      : copyable("contract", `${escape(view.coin.symbol)} token contract`, view.coin.contract, request !== null)
  }
</div>`
  return document(`${what} of ${view.usdAmount} USD`, body, live)
}

export const notFoundPage = (kind: "payment" | "challenge") =>
  document(
    "Not found",
    `<div class="card"><h1>${kind === "payment" ? "Payment" : "Donation"} not found</h1>
<p class="sub">Check the link you were given. Do not send anything to an address from a page that does not load.</p></div>`,
    false
  )
