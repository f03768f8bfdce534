// A callback receiver that accepts only callbacks signed by confirmd.
// Run: CONFIRMD_WEBHOOK_SECRET=whsec_... PORT=3000 node examples/webhook-receiver.mjs
import { createServer } from "node:http"
import { Webhook } from "standardwebhooks"

const webhook = new Webhook(process.env.CONFIRMD_WEBHOOK_SECRET)
const handled = new Set() // keep this in your database: callbacks may repeat

const server = createServer((req, res) => {
  const chunks = []
  req.on("data", (chunk) => chunks.push(chunk))
  req.on("end", () => {
    // Verify the exact bytes received, before parsing them.
    const body = Buffer.concat(chunks).toString("utf8")
    let event
    try {
      event = webhook.verify(body, req.headers) // checks signature and timestamp (5 min tolerance)
    } catch {
      res.writeHead(401).end()
      return
    }
    const id = req.headers["webhook-id"] // the same on every retry and redelivery
    if (!handled.has(id)) {
      handled.add(id)
      console.log(`paid: ${event.paymentId} tx ${event.txHash}`) // fulfil the order here
    }
    res.writeHead(204).end()
  })
})
server.listen(Number(process.env.PORT ?? 3000), () => console.log(`listening on ${server.address().port}`))
