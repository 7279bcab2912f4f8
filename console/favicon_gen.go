//go:build ignore

// favicon_gen draws assets/favicon.ico: the drawing of assets/favicon.svg
// (a prompt, ">_", on the console's header colour) as a 32×32 PNG inside an
// ICO, for browsers that ask for /favicon.ico. Run: go generate ./console
package main

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"log"
	"math"
	"os"
)

const size, samples = 32, 4

type seg struct{ x0, y0, x1, y1 float64 }

func dist(px, py float64, s seg) float64 {
	dx, dy := s.x1-s.x0, s.y1-s.y0
	t := math.Max(0, math.Min(1, ((px-s.x0)*dx+(py-s.y0)*dy)/(dx*dx+dy*dy)))
	return math.Hypot(px-(s.x0+t*dx), py-(s.y0+t*dy))
}

// inRoundedRect: the 32×32 square with corners of radius 6.
func inRoundedRect(x, y float64) bool {
	const r = 6.0
	cx, cy := math.Max(r, math.Min(size-r, x)), math.Max(r, math.Min(size-r, y))
	return math.Hypot(x-cx, y-cy) <= r
}

func main() {
	bg := color.RGBA{0x10, 0x18, 0x20, 0xff}
	chevron := []seg{{9, 9, 16, 16}, {16, 16, 9, 23}}
	under := []seg{{18, 23, 24, 23}}
	blue := color.RGBA{0x58, 0xa6, 0xff, 0xff}
	white := color.RGBA{0xf0, 0xf3, 0xf6, 0xff}
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			var r, g, b, a float64
			for sy := 0; sy < samples; sy++ {
				for sx := 0; sx < samples; sx++ {
					px, py := float64(x)+(float64(sx)+.5)/samples, float64(y)+(float64(sy)+.5)/samples
					if !inRoundedRect(px, py) {
						continue
					}
					c := bg
					for _, s := range chevron {
						if dist(px, py, s) <= 1.75 {
							c = blue
						}
					}
					for _, s := range under {
						if dist(px, py, s) <= 1.75 {
							c = white
						}
					}
					r, g, b, a = r+float64(c.R), g+float64(c.G), b+float64(c.B), a+1
				}
			}
			if a == 0 {
				continue
			}
			img.SetNRGBA(x, y, color.NRGBA{uint8(r / a), uint8(g / a), uint8(b / a), uint8(255 * a / samples / samples)})
		}
	}
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, img); err != nil {
		log.Fatal(err)
	}
	// ICONDIR (reserved, type 1 = icon, 1 image) and one ICONDIRENTRY
	// pointing at the PNG.
	var ico bytes.Buffer
	for _, v := range []any{uint16(0), uint16(1), uint16(1),
		uint8(size), uint8(size), uint8(0), uint8(0), uint16(1), uint16(32), uint32(pngBuf.Len()), uint32(6 + 16)} {
		_ = binary.Write(&ico, binary.LittleEndian, v)
	}
	ico.Write(pngBuf.Bytes())
	if err := os.WriteFile("assets/favicon.ico", ico.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
