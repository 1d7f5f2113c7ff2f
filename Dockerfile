# Sluice itself, for docker-compose users. Build: docker build -t sluice .
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json tsconfig.client.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /app
# The production profile whatever the config file says: the built-in config/local.yaml (published
# demo keys, the simulator) is refused unless SLUICE_PROFILE=dev is chosen explicitly. Give a
# config of your own with SLUICE_CONFIG (mounted), secrets by environment (ANTHROPIC_API_KEY…).
ENV NODE_ENV=production SLUICE_PROFILE=production
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY config ./config
COPY schemas ./schemas
COPY migrations ./migrations
COPY lua ./lua
USER node
EXPOSE 8080 8089
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["start"]
