# Sluice itself, for docker-compose users. Build: docker build -t sluice .
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
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
