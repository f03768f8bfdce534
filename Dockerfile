# confirmd: runs dist/main.js, the program and its packages in one file, built here by
# build.mjs (esbuild) as `npm install` builds it for `npm start`.
#   docker build -t confirmd .
#   docker compose up -d   (PostgreSQL, Kafka, two replicas, Prometheus)

# Production dependencies only, at the lockfile's versions. `npm install` rather than `npm ci`:
# the lockfile lacks other platforms' optional packages (see .ci/run), which npm ci refuses.
FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm install --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production \
    PORT=8080 \
    DATA_DIR=/app/data
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json build.mjs ./
COPY src ./src
COPY migrations ./migrations
RUN node build.mjs
# The embedded mode writes only DATA_DIR; everything else stays read-only for the user.
RUN mkdir -p /app/data && chown node:node /app/data
USER node
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# node itself is PID 1 and receives SIGTERM (npm would not pass it on): the program drains and exits 0.
STOPSIGNAL SIGTERM
CMD ["node", "dist/main.js"]
