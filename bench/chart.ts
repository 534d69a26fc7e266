// A small hand-written SVG line chart (log–log panels side by side) for docs/bench.svg.

export interface Series {
  label: string;
  color: string;
  points: ReadonlyArray<readonly [number, number]>;
  dashed?: boolean;
}

export interface Panel {
  title: string;
  yLabel: string;
  series: readonly Series[];
  /** Horizontal reference lines, e.g. a target. */
  marks?: ReadonlyArray<{ label: string; y: number }>;
}

const PANEL_W = 360;
const PANEL_H = 300;
const PAD = { left: 58, right: 14, top: 34, bottom: 112 };
const FONT = 'font-family="sans-serif"';

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function decades(min: number, max: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++)
    ticks.push(10 ** e);
  return ticks;
}

function tickText(value: number): string {
  if (value >= 1000) return `${value / 1000}k`;
  return String(value);
}

function renderPanel(panel: Panel, offsetX: number): string {
  const points = panel.series.flatMap((s) => s.points).filter(([x, y]) => x > 0 && y > 0);
  const ys = [...points.map(([, y]) => y), ...(panel.marks ?? []).map((m) => m.y)];
  const xs = points.map(([x]) => x);
  const yTicks = decades(Math.min(...ys), Math.max(...ys));
  const xTicks = decades(Math.min(...xs), Math.max(...xs));
  const [yMin, yMax] = [yTicks[0] as number, yTicks[yTicks.length - 1] as number];
  const [xMin, xMax] = [xTicks[0] as number, xTicks[xTicks.length - 1] as number];
  const plotW = PANEL_W - PAD.left - PAD.right;
  const plotH = PANEL_H - PAD.top - PAD.bottom;
  const sx = (x: number) =>
    offsetX +
    PAD.left +
    ((Math.log10(x) - Math.log10(xMin)) / (Math.log10(xMax) - Math.log10(xMin))) * plotW;
  const sy = (y: number) =>
    PAD.top +
    plotH -
    ((Math.log10(y) - Math.log10(yMin)) / (Math.log10(yMax) - Math.log10(yMin))) * plotH;
  const out: string[] = [];
  out.push(
    `<text x="${offsetX + PANEL_W / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold" ${FONT}>${escapeXml(panel.title)}</text>`,
  );
  for (const y of yTicks) {
    out.push(
      `<line x1="${sx(xMin)}" x2="${sx(xMax)}" y1="${sy(y)}" y2="${sy(y)}" stroke="#ddd"/>`,
      `<text x="${sx(xMin) - 4}" y="${sy(y) + 4}" text-anchor="end" font-size="10" ${FONT}>${tickText(y)}</text>`,
    );
  }
  for (const x of xTicks) {
    out.push(
      `<line x1="${sx(x)}" x2="${sx(x)}" y1="${sy(yMin)}" y2="${sy(yMax)}" stroke="#eee"/>`,
      `<text x="${sx(x)}" y="${sy(yMin) + 14}" text-anchor="middle" font-size="10" ${FONT}>${tickText(x)}</text>`,
    );
  }
  out.push(
    `<rect x="${sx(xMin)}" y="${sy(yMax)}" width="${plotW}" height="${plotH}" fill="none" stroke="#888"/>`,
    `<text x="${sx(Math.sqrt(xMin * xMax))}" y="${sy(yMin) + 28}" text-anchor="middle" font-size="11" ${FONT}>CIDRs in the config</text>`,
    `<text transform="translate(${offsetX + 14} ${PAD.top + plotH / 2}) rotate(-90)" text-anchor="middle" font-size="11" ${FONT}>${escapeXml(panel.yLabel)}</text>`,
  );
  for (const mark of panel.marks ?? []) {
    out.push(
      `<line x1="${sx(xMin)}" x2="${sx(xMax)}" y1="${sy(mark.y)}" y2="${sy(mark.y)}" stroke="#c00" stroke-dasharray="2 3"/>`,
      `<text x="${sx(xMax) - 3}" y="${sy(mark.y) - 3}" text-anchor="end" font-size="10" fill="#c00" ${FONT}>${escapeXml(mark.label)}</text>`,
    );
  }
  panel.series.forEach((series, i) => {
    const valid = series.points.filter(([x, y]) => x > 0 && y > 0);
    const path = valid.map(
      ([x, y], j) => `${j === 0 ? 'M' : 'L'}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`,
    );
    const dash = series.dashed ? ' stroke-dasharray="6 4"' : '';
    out.push(
      `<path d="${path.join(' ')}" fill="none" stroke="${series.color}" stroke-width="2"${dash}/>`,
    );
    for (const [x, y] of valid) {
      out.push(
        `<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="2.5" fill="${series.color}"/>`,
      );
    }
    const legendY = PANEL_H - PAD.bottom + 44 + i * 15;
    out.push(
      `<line x1="${offsetX + PAD.left}" x2="${offsetX + PAD.left + 20}" y1="${legendY - 4}" y2="${legendY - 4}" stroke="${series.color}" stroke-width="2"${dash}/>`,
      `<text x="${offsetX + PAD.left + 26}" y="${legendY}" font-size="10.5" ${FONT}>${escapeXml(series.label)}</text>`,
    );
  });
  return out.join('\n');
}

export function renderChart(panels: readonly Panel[], caption: string): string {
  const width = PANEL_W * panels.length;
  const height = PANEL_H + 20;
  const body = panels.map((panel, i) => renderPanel(panel, i * PANEL_W)).join('\n');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    body,
    `<text x="${width / 2}" y="${height - 6}" text-anchor="middle" font-size="10" fill="#555" ${FONT}>${escapeXml(caption)}</text>`,
    '</svg>',
    '',
  ].join('\n');
}
