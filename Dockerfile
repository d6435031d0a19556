# One image for every service: `rolloutledger serve --only <service>`.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/rolloutledger ./cmd/rolloutledger

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rolloutledger /usr/local/bin/rolloutledger
USER nonroot:nonroot
EXPOSE 7070
ENTRYPOINT ["/usr/local/bin/rolloutledger"]
CMD ["serve", "--addr", "0.0.0.0:7070"]
